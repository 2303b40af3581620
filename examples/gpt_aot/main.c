/* A plain C program running the static GPT's forward pass, compiled ahead of time into the C
 * library gpt_forward (gen.cpp): no C++, no metagrad.
 *
 *   gpt_aot_c WEIGHTS TOKENS [LOGITS]
 *
 * WEIGHTS: GPT_WEIGHTS float32 values (config.h's order), TOKENS: GPT_BATCH * GPT_CONTEXT int32 token
 * ids, both raw in the machine's byte order. Prints each window's most likely next token and its
 * logit, and writes every logit (float32, (batch, context, vocabulary)) to LOGITS if given. */
#include <gpt_forward.h>
#include <stdio.h>
#include <stdlib.h>

#include "config.h"

static int read_all(const char* path, void* to, size_t size, size_t n) {
  FILE* f = fopen(path, "rb");
  size_t got = f ? fread(to, size, n, f) : 0;
  int extra = f ? fgetc(f) != EOF : 0;
  if (f) fclose(f);
  if (got != n || extra) {
    fprintf(stderr, "gpt_aot_c: %s must hold exactly %zu values of %zu bytes\n", path, n, size);
    return 0;
  }
  return 1;
}

int main(int argc, char** argv) {
  const size_t n_logits = (size_t)GPT_BATCH * GPT_CONTEXT * GPT_VOCAB;
  float* weights = malloc(sizeof(float) * GPT_WEIGHTS);
  float* logits = malloc(sizeof(float) * n_logits);
  int32_t tokens[GPT_BATCH * GPT_CONTEXT];
  int b, v, status = 1;
  if (argc < 3 || argc > 4) {
    fprintf(stderr, "usage: %s WEIGHTS TOKENS [LOGITS]\n", argv[0]);
    return 2;
  }
  if (!weights || !logits) return 1;
  if (!read_all(argv[1], weights, sizeof(float), GPT_WEIGHTS) ||
      !read_all(argv[2], tokens, sizeof(int32_t), GPT_BATCH * GPT_CONTEXT))
    goto done;
  for (b = 0; b < GPT_BATCH * GPT_CONTEXT; ++b)
    if (tokens[b] < 0 || tokens[b] >= GPT_VOCAB) {
      fprintf(stderr, "gpt_aot_c: token %d is outside the vocabulary (0..%d)\n", tokens[b], GPT_VOCAB - 1);
      goto done;
    }
  gpt_forward(tokens, weights, logits);
  for (b = 0; b < GPT_BATCH; ++b) { /* the last position's logits: the next token */
    const float* row = logits + ((size_t)b * GPT_CONTEXT + GPT_CONTEXT - 1) * GPT_VOCAB;
    int best = 0;
    for (v = 1; v < GPT_VOCAB; ++v)
      if (row[v] > row[best]) best = v;
    printf("window %d: next token %d (logit %.6f)\n", b, best, row[best]);
  }
  if (argc == 4) {
    FILE* f = fopen(argv[3], "wb");
    if (!f || fwrite(logits, sizeof(float), n_logits, f) != n_logits) {
      fprintf(stderr, "gpt_aot_c: cannot write %s\n", argv[3]);
      if (f) fclose(f);
      goto done;
    }
    fclose(f);
  }
  status = 0;
done:
  free(weights);
  free(logits);
  return status;
}
