# Tokenizers: llama.cpp's test vectors, SPM (llama2.c / GGUF / HF byte-fallback), byte-level BPE
# (tokenizer.json and GGUF "gpt2"), special tokens, errors, speed.
kite_unit_test(test_tok_vectors ${CMAKE_CURRENT_LIST_DIR}/test_tok_vectors.c)
kite_unit_test(test_tok_spm ${CMAKE_CURRENT_LIST_DIR}/test_tok_spm.c)
target_link_libraries(test_tok_spm PRIVATE PkgConfig::JANSSON)
kite_unit_test(test_tok_bpe ${CMAKE_CURRENT_LIST_DIR}/test_tok_bpe.c)
target_link_libraries(test_tok_bpe PRIVATE PkgConfig::JANSSON)
# llama.cpp (node-llama-cpp, from tests/oracle) as the reference for the GGUF tokenizers; skips without node.
kite_unit_test(test_tok_llamacpp ${CMAKE_CURRENT_LIST_DIR}/test_tok_llamacpp.c)
target_link_libraries(test_tok_llamacpp PRIVATE PkgConfig::JANSSON)
# SentencePiece .model files (protobuf): against llama.cpp's vectors and the llama2.c exports.
kite_unit_test(test_tok_spm_model ${CMAKE_CURRENT_LIST_DIR}/test_tok_spm_model.c)
