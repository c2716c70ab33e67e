# The router's SSE parser (the standard's examples, every split, limits) and its upstream client against
# tests/route/fault_server.mjs (a fake OpenAI upstream with fault injection) run by node on loopback.
kite_unit_test(test_route_sse ${CMAKE_CURRENT_LIST_DIR}/test_route_sse.c)
kite_unit_test(test_route_upstream ${CMAKE_CURRENT_LIST_DIR}/test_route_upstream.c)
target_link_libraries(test_route_upstream PRIVATE PkgConfig::JANSSON Threads::Threads)
find_program(KITE_ROUTE_NODE node)
if(NOT KITE_ROUTE_NODE)
  message(WARNING "node not found: test_route_upstream will fail until Node.js >= 20 is installed")
  set(KITE_ROUTE_NODE node)
endif()
set_tests_properties(test_route_upstream PROPERTIES ENVIRONMENT "${KITE_TEST_ENV};KITE_NODE=${KITE_ROUTE_NODE}" TIMEOUT 120)
