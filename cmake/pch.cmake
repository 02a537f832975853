# Precompiled header for the test programs (XDNA_PCH, on by default): every test file includes
# GoogleTest, most include nlohmann/json and the same standard headers, so one PCH of them is
# built once, like a test program, and reused by all (a test object under ASan: ~6.6 -> ~4.4 s
# CPU). The libraries have none: their sources are smaller, and loading a PCH (~100 MB under
# ASan) cost more than parsing their headers (+0.3 to +0.7 s CPU a file, measured).
# A PCH is force-included (-include), so a test that forgets an #include still builds with it:
# configure once with -DXDNA_PCH=OFF to check that every file includes what it uses. GCC skips a
# PCH built with other flags (a warning, -Winvalid-pch) and parses the headers instead.
option(XDNA_PCH "Precompiled header for the test programs" ON)

# Not with ccache: a .gch that ccache replayed into another build directory made cc1plus grow to
# 24 GB and be killed on every compile that loaded it (GCC 12 + ccache 4.7.5, seen 2026-12-01), and
# a warm ccache already skips the parsing a PCH saves. CI builds without a launcher.
if(XDNA_PCH AND (CMAKE_CXX_COMPILER_LAUNCHER MATCHES "ccache" OR CMAKE_C_COMPILER_LAUNCHER MATCHES "ccache"))
  message(STATUS "XDNA_PCH: off under ccache (cmake/pch.cmake)")
  set(XDNA_PCH OFF)
endif()
if(XDNA_PCH)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Winvalid-pch>)
endif()

set(XDNA_TEST_PCH_HEADERS <gtest/gtest.h> <nlohmann/json.hpp> <algorithm> <cmath> <cstring>
    <filesystem> <fstream> <map> <random> <span> <sstream> <string> <vector>)

# An object library `name` that builds the PCH; the caller gives it a test program's options,
# definitions and libraries (tests/CMakeLists.txt), since a PCH is only used with the same flags.
function(xdna_test_pch_target name)
  if(NOT XDNA_PCH)
    return()
  endif()
  file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/${name}.cpp
       CONTENT "// Builds the tests' precompiled header.\n")  # rewritten only when it changes
  add_library(${name} OBJECT ${CMAKE_CURRENT_BINARY_DIR}/${name}.cpp)
  target_precompile_headers(${name} PRIVATE ${XDNA_TEST_PCH_HEADERS})
endfunction()

function(xdna_use_test_pch target pch_target)
  if(XDNA_PCH)
    target_precompile_headers(${target} REUSE_FROM ${pch_target})
  endif()
endfunction()
