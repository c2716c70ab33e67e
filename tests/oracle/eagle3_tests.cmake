# EAGLE-3 drafting against llama.cpp's own (test_eagle3_llamacpp.c): node-llama-cpp's prebuilt libllama,
# with the headers of the source it was built from (its llama/gitRelease.bundle), extracted here once.
set(KITE_LLAMA_BIN_DIR ${PROJECT_SOURCE_DIR}/tests/oracle/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64)
set(KITE_LLAMA_BUNDLE ${PROJECT_SOURCE_DIR}/tests/oracle/node_modules/node-llama-cpp/llama/gitRelease.bundle)
set(KITE_LLAMA_HEADERS ${PROJECT_BINARY_DIR}/llama-cpp-headers)
set(_llama_headers include/llama.h ggml/include/ggml.h ggml/include/ggml-cpu.h ggml/include/ggml-backend.h
    ggml/include/ggml-alloc.h ggml/include/ggml-opt.h ggml/include/gguf.h)
if(NOT EXISTS ${KITE_LLAMA_HEADERS}/gguf.h AND EXISTS ${KITE_LLAMA_BUNDLE})
  execute_process(COMMAND git init -q --bare ${KITE_LLAMA_HEADERS}/src.git)
  execute_process(COMMAND git --git-dir=${KITE_LLAMA_HEADERS}/src.git fetch -q ${KITE_LLAMA_BUNDLE} HEAD)
  foreach(h ${_llama_headers})
    get_filename_component(_name ${h} NAME)
    execute_process(COMMAND git --git-dir=${KITE_LLAMA_HEADERS}/src.git show FETCH_HEAD:${h}
                    OUTPUT_FILE ${KITE_LLAMA_HEADERS}/${_name})
  endforeach()
  file(REMOVE_RECURSE ${KITE_LLAMA_HEADERS}/src.git)
endif()
if(EXISTS ${KITE_LLAMA_HEADERS}/gguf.h)
  # kite_llamacpp_test(name): tests/oracle/name.c with llama_api.c (opens libllama) and llama_compare.c (what
  # the comparisons share).
  function(kite_llamacpp_test name)
    kite_unit_test(${name} ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${name}.c ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/llama_api.c
                   ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/llama_compare.c)
    target_include_directories(${name} PRIVATE ${KITE_LLAMA_HEADERS})
    target_compile_definitions(${name} PRIVATE KITE_LLAMA_LIB_DIR="${KITE_LLAMA_BIN_DIR}")
    target_link_libraries(${name} PRIVATE ${CMAKE_DL_LIBS})
  endfunction()
  kite_llamacpp_test(test_eagle3_llamacpp)
  # DFlash block drafting against llama.cpp's (test_dflash_llamacpp.c), the same way.
  kite_llamacpp_test(test_dflash_llamacpp)
  # MTP drafting (Qwen3.5's next-n block) against llama.cpp's draft-mtp (test_mtp_llamacpp.c), the same way.
  kite_llamacpp_test(test_mtp_llamacpp)
  # bench/eagle3_vs_llamacpp.c: one head step against one target token in both engines (not a test).
  add_executable(eagle3_vs_llamacpp ${PROJECT_SOURCE_DIR}/bench/eagle3_vs_llamacpp.c ${CMAKE_CURRENT_LIST_DIR}/llama_api.c)
  target_include_directories(eagle3_vs_llamacpp PRIVATE ${KITE_LLAMA_HEADERS} ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(eagle3_vs_llamacpp PRIVATE kite_internal ${CMAKE_DL_LIBS})
else()
  message(WARNING "node-llama-cpp's source bundle not found (npm ci in tests/oracle): test_eagle3_llamacpp is not built")
endif()
