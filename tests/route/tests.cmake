# The hybrid router's brain: the config parser (paths in errors, no key in any message), the decision
# table (every policy, set-aside case, fallback order, 400/503), numpy's linear quantile, the latency
# model, and kite_router on the real stories260K model (request facts, explain, calibrate against an
# independent log-softmax of kite_eval's logits); `kite route` as a process.
kite_unit_test(test_route_config ${CMAKE_CURRENT_LIST_DIR}/test_route_config.c)
kite_unit_test(test_route_policy ${CMAKE_CURRENT_LIST_DIR}/test_route_policy.c)
kite_unit_test(test_route_router ${CMAKE_CURRENT_LIST_DIR}/test_route_router.c)
target_link_libraries(test_route_router PRIVATE PkgConfig::JANSSON)
kite_script_test(test_cli_route route/test_route_cli.py)
