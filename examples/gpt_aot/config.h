/* The static GPT of the AOT example (examples/gpt_aot): its sizes, shared by the C program
 * (main.c), the generator (gen.cpp) and the checker (check.cpp). The character GPT of examples/gpt,
 * smaller: 2 blocks, width 64, 4 heads, context 32, vocabulary 96; a batch of 2 windows. */
#ifndef GPT_AOT_CONFIG_H
#define GPT_AOT_CONFIG_H

#define GPT_BATCH 2
#define GPT_CONTEXT 32
#define GPT_WIDTH 64
#define GPT_HEADS 4
#define GPT_BLOCKS 2
#define GPT_VOCAB 96
/* The weights as one float array, in the static model's order (static_gpt.hpp, fx::for_each_param):
 * wte, wpe, each block's 12, then ln_f's weight and bias and the head. */
#define GPT_BLOCK_WEIGHTS (4 * GPT_WIDTH + 4 * (GPT_WIDTH * GPT_WIDTH + GPT_WIDTH) + 8 * GPT_WIDTH * GPT_WIDTH + 5 * GPT_WIDTH)
#define GPT_WEIGHTS                                                                                  \
  (GPT_VOCAB * GPT_WIDTH + GPT_CONTEXT * GPT_WIDTH + GPT_BLOCKS * GPT_BLOCK_WEIGHTS + 2 * GPT_WIDTH + \
   GPT_VOCAB * GPT_WIDTH)

#endif
