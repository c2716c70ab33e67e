/* Hugging Face folders to GGUF, as llama.cpp's convert_hf_to_gguf.py writes them (convert_hf.c), so that
 * kite quantize takes a folder where llama-quantize takes the converter's output. */
#ifndef KITE_QUANT_CONVERT_HF_H
#define KITE_QUANT_CONVERT_HF_H

#include "base/error.h"

/* Writes folder (config.json, safetensors, tokenizer.json, tokenizer_config.json) as an unquantized GGUF
 * at gguf_path: llama, qwen2, qwen3 and gemma3 models with a BPE tokenizer. Fails naming the file and
 * the reason for anything else, writing nothing. */
int kite_convert_hf_to_gguf(const char *folder, const char *gguf_path, kite_error *e);

#endif
