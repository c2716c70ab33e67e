# The default model (kite run with no --model) and `cmake --install`: a throwaway install of this build
# tree into a temporary prefix, the C example built against it with pkg-config and with find_package(kite),
# run on the installed default model. Needs every install target built (the default `cmake --build`).
kite_script_test(test_default_model install/test_default_model.py)
set_tests_properties(test_default_model PROPERTIES TIMEOUT 60 ENVIRONMENT
  "${KITE_TEST_ENV};KITE_INSTALLED_DEFAULT_MODEL=${CMAKE_INSTALL_FULL_DATADIR}/kite/models/${KITE_DEFAULT_MODEL_FILE}")
# The example is compiled with the compiler and sanitizer flags of this build: a sanitized libkite.so
# needs the sanitizer runtime that only an executable linked with -fsanitize brings.
if(KITE_SANITIZE)
  set(KITE_INSTALL_TEST_FLAGS "-fsanitize=address,undefined -fno-sanitize-recover=all")
else()
  set(KITE_INSTALL_TEST_FLAGS "")
endif()
kite_script_test(test_install install/test_install.py)
set_tests_properties(test_install PROPERTIES TIMEOUT 120 ENVIRONMENT
  "${KITE_TEST_ENV};KITE_CC=${CMAKE_C_COMPILER};KITE_CC_FLAGS=${KITE_INSTALL_TEST_FLAGS};KITE_CMAKE=${CMAKE_COMMAND};KITE_DEFAULT_MODEL_FILE=${KITE_DEFAULT_MODEL_FILE}")
