// Helpers shared by the Hub download and upload code (hf_hub_*.cpp); not a
// public interface.
#pragma once

#include <string>
#include <vector>

#include "io/hf_hub.h"
#include "io/http_client.h"

namespace loom::hub_detail {

// "Authorization: Bearer ..." when there is a token; nothing otherwise.
std::vector<std::string> auth_headers(const HubSettings& s);
// Throws a message for a failed response: the request, the status, the Hub's
// X-Error-Message or body (shortened), and for 401/403 where the token came
// from (or that none was given), never the token itself.
[[noreturn]] void fail_response(const HttpResponse& r, const std::string& what,
                                const HubSettings& s);
// The JSON body of a successful response, or fail_response.
std::string expect_ok(const HttpResponse& r, const std::string& what, const HubSettings& s);

}  // namespace loom::hub_detail
