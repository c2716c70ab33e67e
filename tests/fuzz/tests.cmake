# Fuzz targets: tests/fuzz/fuzz_<name>.c with a corpus in tests/fuzz/corpus/<name>/.
# With KITE_FUZZ (clang), each builds as a libFuzzer binary (.ci/run fuzzes each for a fixed time);
# always, each also builds with a replay main and replays its corpus as a ctest test.
file(GLOB KITE_FUZZ_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/fuzz_*.c)
foreach(src ${KITE_FUZZ_SOURCES})
  get_filename_component(target ${src} NAME_WE)
  string(REPLACE "fuzz_" "" corpus_name ${target})
  add_executable(${target}_replay ${src} ${CMAKE_CURRENT_LIST_DIR}/replay_main.c)
  target_link_libraries(${target}_replay PRIVATE kite_internal)
  add_test(NAME ${target}_corpus COMMAND ${target}_replay ${CMAKE_CURRENT_LIST_DIR}/corpus/${corpus_name})
  if(KITE_FUZZ)
    add_executable(${target} ${src})
    target_compile_options(${target} PRIVATE -fsanitize=fuzzer)
    target_link_options(${target} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${target} PRIVATE kite_internal)
  endif()
endforeach()
