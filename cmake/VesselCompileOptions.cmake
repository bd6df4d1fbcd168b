# Warnings and sanitizers shared by every vessel target (vessel_compile_options INTERFACE target).
add_library(vessel_compile_options INTERFACE)
target_compile_options(vessel_compile_options INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Wnull-dereference -Wimplicit-fallthrough)

if(VESSEL_SANITIZE)
  # Applied globally so that gtest mains and libraries agree on the instrumented runtime.
  add_compile_options(-fsanitize=${VESSEL_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${VESSEL_SANITIZE})
endif()

if(VESSEL_BUILD_FUZZERS)
  # Coverage feedback from every library a fuzz target links, not only from the harness itself.
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()

# A private helper for internal targets; installed targets only carry usage requirements.
function(vessel_target_defaults target)
  target_link_libraries(${target} PRIVATE $<BUILD_INTERFACE:vessel_compile_options>)
  target_compile_features(${target} PUBLIC cxx_std_20)
endfunction()
