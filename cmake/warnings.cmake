# One warning policy for every target; -Werror in CI through LOOM_WERROR.
function(loom_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wno-unknown-pragmas>)
  if(LOOM_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
  if(LOOM_SANITIZE)
    # g++ 12's flow analysis under -fsanitize reports maybe-uninitialized inside
    # libstdc++ (std::regex, std::optional); those are false positives.
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wno-maybe-uninitialized>)
  endif()
endfunction()

if(LOOM_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# Native vector width: the CPU kernels are written for AVX2/AVX-512 and let the
# compiler vectorise plain loops (llm.c's approach).
if(NOT LOOM_PORTABLE)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-march=native>)
endif()
