# Sampling: Philox known answers, uniform/Gumbel noise, logit processors, chi-square of the Gumbel-max sampler.
kite_unit_test(test_sample_philox ${CMAKE_CURRENT_LIST_DIR}/test_philox.c)
kite_unit_test(test_sample_processors ${CMAKE_CURRENT_LIST_DIR}/test_processors.c)
kite_unit_test(test_sample_distribution ${CMAKE_CURRENT_LIST_DIR}/test_distribution.c)
