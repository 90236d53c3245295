"""The experiment layer: a grid of runs from a TOML file (`grid`), engines that run them
(`engine`: a local process pool or Ray), the report over their run folders (`report`, figures in
`plots`), and experiments defined in code (`demo`, `extrapolate`)."""
