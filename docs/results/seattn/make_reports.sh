set -e
cd "$(dirname "$0")/../../.."

R=${RECALL_LAB:-recall-lab}
D=docs/results/seattn/reports
mkdir -p $D
for f in 1 2 4 8; do
  $R report runs/seattn-pretrain --metric test.x$f.acc --out $D/pretrain-x$f --no-plots > /dev/null
  for sfx in "" "-full"; do
    m=test.x$f$sfx.acc
    plots=--no-plots; [ "$f$sfx" = "8-full" -o "$f$sfx" = "4-full" ] && plots=--plots
    $R report runs/seattn --metric $m --out $D/x$f$sfx $plots > /dev/null
  done
done
echo ok
