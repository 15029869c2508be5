// Attention at a subset of query positions.
//
// A model whose head reads a few positions (token 0 for sequence
// classification, the labelled positions for masked LM) needs its last layer's
// output only there: that layer's queries, and everything after attention, can
// run on those rows alone, while keys and values still come from every
// position. Per query row these kernels do what attention_forward/backward do
// (same masks, same dropout elements, same softmax), so the rows they give
// equal the whole-sequence result at those rows. Their GEMMs are fp32 under
// any compute dtype: a handful of query rows, one layer.
#pragma once

#include <cstdint>

#include "ops/attention.h"

namespace loom {

// Global query rows b * T + t, strictly increasing.
struct AttnRows {
    const int64_t* rows = nullptr;
    int64_t M = 0;
};

// out (M, NH*HS): row r is the attention output at query rows.rows[r].
// att (M, NH, T): the probabilities before dropout, grouped per sample: the
// queries [r0, r1) of sample b, head h, are the (r1 - r0, T) block at
// att + (r0 * NH + h * (r1 - r0)) * T.
void attention_rows_forward(float* out, float* att, const float* q, const float* k, const float* v,
                            int64_t ld, const AttnShape& s, const AttnMask& mask,
                            const DropoutSpec& drop, const AttnRows& rows);

// dout (M, NH*HS) at the query rows. dq, dk, dv (stride ld) are overwritten for
// every row of the batch: dq is zero outside the query rows, and dk, dv sum what
// the query rows send to every key. scratch (M, NH, T).
void attention_rows_backward(float* dq, float* dk, float* dv, float* scratch, const float* dout,
                             const float* att, const float* q, const float* k, const float* v,
                             int64_t ld, const AttnShape& s, const AttnMask& mask,
                             const DropoutSpec& drop, const AttnRows& rows);

}  // namespace loom
