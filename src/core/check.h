// Errors and invariant checks.
//
// Loom reports bad input and broken invariants by throwing loom::Error with a
// message that names the file, tensor or key and what was expected; the CLI
// catches it at the top and prints it. LOOM_CHECK is for conditions a user can
// trigger (always on); LOOM_ASSERT for programmer errors (also always on: the
// cost is a branch, and a wrong gradient is worse than a slow one).
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace loom {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& what) : std::runtime_error(what) {}
};

[[noreturn]] inline void fail_at(const char* file, int line, const std::string& msg) {
    (void)file;
    (void)line;
    throw Error(msg);
}

[[noreturn]] inline void assert_fail(const char* file, int line, const char* cond,
                                     const std::string& msg) {
    throw Error(fmt::format("internal error at {}:{}: {} ({})", file, line, msg, cond));
}

}  // namespace loom

// LOOM_FAIL("safetensors {}: header length {} past end of file", path, n);
#define LOOM_FAIL(...) ::loom::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))

#define LOOM_CHECK(cond, ...)                                                   \
    do {                                                                        \
        if (!(cond)) ::loom::fail_at(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
    } while (0)

#define LOOM_ASSERT(cond, ...)                                                          \
    do {                                                                                \
        if (!(cond))                                                                    \
            ::loom::assert_fail(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
    } while (0)
