# Run at build time (cmake -P): writes the source tree's revision (git describe --dirty) into the
# header OUT and the file REV_FILE, rewriting them only when it changed, so that every build stamps
# the revision it was built from rather than the one seen at configure time, and rebuilds nothing
# when the revision stays.
execute_process(COMMAND git describe --always --dirty --abbrev=12
                WORKING_DIRECTORY ${SRC} OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET)
if(NOT rev)
  set(rev unknown)
endif()
set(text "#pragma once\n#define SKIPSOFTMAX_GIT_REVISION \"${rev}\"\n")
set(old "")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT old STREQUAL text OR NOT EXISTS ${REV_FILE})
  file(WRITE ${OUT} "${text}")
  file(WRITE ${REV_FILE} "${rev}\n")
endif()
