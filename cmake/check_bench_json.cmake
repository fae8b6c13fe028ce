# Runs a benchmark with --json=OUT and checks that OUT is well-formed JSON
# with the expected top-level "bench" field. Speed is never checked.
file(REMOVE ${OUT})
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${CMD} ${args} --json=${OUT} RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "benchmark exited ${rc}\n${out}\n${err}")
endif()
file(READ ${OUT} text)
string(JSON bench ERROR_VARIABLE json_err GET "${text}" bench)
if(json_err)
  message(FATAL_ERROR "malformed JSON in ${OUT}: ${json_err}\n${text}")
endif()
if(NOT bench STREQUAL EXPECT)
  message(FATAL_ERROR "JSON names bench '${bench}', expected '${EXPECT}'")
endif()
message(STATUS "${out}")
