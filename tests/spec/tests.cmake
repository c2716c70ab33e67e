# Speculative decoding: output identical to plain decoding for every drafter and budget (public API),
# the verification walk and the rejection verifier (internal), and the CLI. The family and drafter tests
# below share spec_harness.c (models, runs compared with plain decoding, the drafters' common checks).
kite_unit_test(test_spec_exact ${CMAKE_CURRENT_LIST_DIR}/test_spec_exact.c)
kite_unit_test(test_spec_internal ${CMAKE_CURRENT_LIST_DIR}/test_spec_internal.c)
kite_script_test(test_spec_cli spec/test_spec_cli.py)
# Each family's layer structure: speculation exact on its tiny-ARCH random model (one executable,
# the shape as argument; add a family with one kite_spec_family_test line).
add_executable(test_spec_family ${CMAKE_CURRENT_LIST_DIR}/test_spec_family.c ${CMAKE_CURRENT_LIST_DIR}/spec_harness.c)
target_link_libraries(test_spec_family PRIVATE kite_internal PkgConfig::CMOCKA)
function(kite_spec_family_test name shape)
  add_test(NAME ${name} COMMAND test_spec_family ${shape} ${ARGN} WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
  set_tests_properties(${name} PROPERTIES ENVIRONMENT "${KITE_TEST_ENV}" TIMEOUT 600)
endfunction()
# Gemma 3's sliding-window and global layers (and the ring's memory bound).
kite_spec_family_test(test_spec_gemma3 tiny-gemma3 --ring)
kite_spec_family_test(test_spec_qwen3moe tiny-qwen3moe)
# Gemma 4's different head sizes on local and global layers (per-layer cache rows), k_eq_v, proportional RoPE.
kite_spec_family_test(test_spec_gemma4 tiny-gemma4 --ring)
# Muse Glimmer's output gate, NoPE global layers, embedding norm, logit scale.
kite_spec_family_test(test_spec_muse_glimmer tiny-muse-glimmer --ring)
# Qwen3.5: Gated DeltaNet layers, whose recurrent state a verification pass must leave on the accepted path.
kite_spec_family_test(test_spec_qwen35 tiny-qwen35)
# LFM2's conv layers: their per-position conv rows under trees, commits, rewinds, copies and saves (and the ring's
# memory bound).
kite_spec_family_test(test_spec_lfm2 tiny-lfm2 --ring)
# A tree pass whose accepted path is the second branch leaves the session exactly as the chain does: one
# gen-model shape per family (add a family's tiny shape to the list).
add_executable(test_tree_commit_exact ${CMAKE_CURRENT_LIST_DIR}/test_tree_commit_exact.c)
target_link_libraries(test_tree_commit_exact PRIVATE kite_internal PkgConfig::CMOCKA)
target_include_directories(test_tree_commit_exact PRIVATE ${PROJECT_SOURCE_DIR}/tests/unit)
add_test(NAME test_tree_commit_exact COMMAND test_tree_commit_exact tiny tiny-gemma3 tiny-qwen3moe tiny-lfm2 tiny-gemma4 tiny-muse-glimmer tiny-qwen35
         WORKING_DIRECTORY ${PROJECT_BINARY_DIR})
set_tests_properties(test_tree_commit_exact PROPERTIES ENVIRONMENT "${KITE_TEST_ENV}" TIMEOUT 600)
# EAGLE-3 heads: capture identical under speculation, exactness with the head drafting, its cache in step,
# bad heads refused (random tiny target and head written by kite_write_random_model).
kite_unit_test(test_spec_eagle3 ${CMAKE_CURRENT_LIST_DIR}/test_spec_eagle3.c ${CMAKE_CURRENT_LIST_DIR}/spec_harness.c)
# DFlash block drafters: exactness with the drafter (blocks 16/32, causal, trees, budgets to 32, penalties),
# its injected cache in step, bad drafters refused (random tiny target and drafters by kite_write_random_model).
kite_unit_test(test_spec_dflash ${CMAKE_CURRENT_LIST_DIR}/test_spec_dflash.c ${CMAKE_CURRENT_LIST_DIR}/spec_harness.c)
# The MTP drafter (Qwen3.5's next-n block): the head against a double reference from llama.cpp's graph_mtp,
# exactness with it drafting (greedy and sampled, chains and trees, budgets to 32), a model without next-n
# layers refused (random tiny-qwen35-mtp / tiny-qwen35 written by kite_write_random_model).
kite_unit_test(test_spec_mtp ${CMAKE_CURRENT_LIST_DIR}/test_spec_mtp.c ${CMAKE_CURRENT_LIST_DIR}/spec_harness.c)
# DFlash-2 drafters (gated convolutions, candidate selector): exactness (greedy, seeded, chains, trees,
# budgets 1..32), acceptance on the drafter's own walk, drafts that follow the lattice, bad files refused.
kite_unit_test(test_spec_dflash2 ${CMAKE_CURRENT_LIST_DIR}/test_spec_dflash2.c ${CMAKE_CURRENT_LIST_DIR}/spec_harness.c)
# DSpark drafters (Markov head per node, confidence head): exactness (greedy, seeded, chains, trees, budgets
# 1..32, from the anchor and with a bonus anchor) and the confidence threshold (draft_p_min).
kite_unit_test(test_spec_dspark ${CMAKE_CURRENT_LIST_DIR}/test_spec_dspark.c ${CMAKE_CURRENT_LIST_DIR}/spec_harness.c)
