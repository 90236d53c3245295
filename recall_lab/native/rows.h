/* Shared by the native kernels: exported entry points take (rows, nt) and split the rows into
 * min(rows, nt) contiguous ranges on OpenMP threads: the libgomp that torch has already loaded, so
 * these calls share torch's thread pool instead of competing with its spin-waiting workers. A
 * kernel computes each row the same way whatever the split. Inside the loop, R0(rows) and
 * R1(rows) bound the range and `part` numbers it (scratch buffers come one per range). */
#ifndef RECALL_LAB_ROWS_H
#define RECALL_LAB_ROWS_H

#define FOR_RANGES(rows, nt)                                                                   \
    const long parts_ = (rows) < (nt) ? (rows) : (nt);                                         \
    _Pragma("omp parallel for schedule(static) num_threads(parts_ > 0 ? parts_ : 1)")          \
    for (long part = 0; part < parts_; part++)
#define R0(rows) ((rows) * part / parts_)
#define R1(rows) ((rows) * (part + 1) / parts_)

#endif
