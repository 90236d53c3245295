/* The diagonal-plus-rank-one (DPLR) recurrence on the CPU, forward and backward: the native
 * path of recall_lab/mixers/dplr_native.py, for RWKV-7 and the delta-rule family.
 *
 *   S_t = diag(exp g_t) S_{t-1} + b_t (a_t^T S_{t-1}) + k_t v_t^T,   o_t = S_t^T q_t,  S_0 = 0
 *
 * per row (one batch element and head); state S [dk, dv]. The same recurrence as
 * `dplr_recurrent` in recall_lab/mixers/rwkv7.py (its reference), one token at a time.
 *
 * Why a loop and not torch's chunked form: at the lab's widths (heads of 4-16 key channels) the
 * chunked form is thousands of tiny batched matmuls and layout copies; RWKV-7 at head size 4 on
 * [32 x 66] spent ~65 ms per layer and step in it for ~4 MFLOP of recurrence.
 *
 * Backward: dS starts at the gradient of the final state (or 0) and runs back through
 *   dS += q_t do_t^T;  dq_t = S_t do_t;  dk_t = dS v_t;  dv_t = dS^T k_t;  r = S_{t-1}^T a_t;
 *   db_t = dS r;  dr = dS^T b_t;  dg_t = exp(g_t) * rowsum(dS * S_{t-1});  da_t = S_{t-1} dr;
 *   dS <- diag(exp g_t) dS + a_t dr^T.
 * The forward keeps the state at the start of every block of CK tokens (ck); the backward
 * recomputes a block's states from it (memory rows x L / CK x dk x dv, not rows x L x dk x dv).
 *
 * Layouts (contiguous, token-major as the mixers make them): q, k, a, b, g, dq, dk, da, db, dg
 * [B, L, H, dk]; v, o, dout, dv [B, L, H, dv]; s_out, ds_end [B, H, dk, dv] (either may be
 * NULL); ck [B, H, ceil(L / CK), dk, dv]. Built for float (suffix _f32) and double (_f64); each
 * row is computed the same way whatever the thread split. */
#include <math.h>
#include <stdlib.h>

#include "rows.h"

#define CK 16

long dplr_checkpoint(void) { return CK; }

#define T float
#define FN(name) name##_f32
#define EXP expf
#include "dplr_impl.h"
#undef T
#undef FN
#undef EXP

#define T double
#define FN(name) name##_f64
#define EXP exp
#include "dplr_impl.h"
#undef T
#undef FN
#undef EXP
