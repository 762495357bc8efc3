// redacted_url (otlp_http_options.h): an endpoint as logs may show it.
#include <string>

#include "lens/otlp_http_options.h"

namespace lens {

std::string redacted_url(std::string_view url) {
  std::string out(url);
  const auto scheme = out.find("://");
  const std::size_t authority = scheme == std::string::npos ? 0 : scheme + 3;
  const auto path = out.find_first_of("/?#", authority);
  const auto at = out.rfind('@', path == std::string::npos ? out.size() : path);
  if (at != std::string::npos && at >= authority) out.replace(authority, at - authority, "***");
  // Each query value: key=***.
  const auto query = out.find('?');
  if (query != std::string::npos) {
    const auto fragment = out.find('#', query);
    std::string rebuilt = out.substr(0, query + 1);
    const std::string q = out.substr(
        query + 1, fragment == std::string::npos ? std::string::npos : fragment - query - 1);
    std::size_t pos = 0;
    while (pos <= q.size()) {
      auto amp = q.find('&', pos);
      if (amp == std::string::npos) amp = q.size();
      const std::string item = q.substr(pos, amp - pos);
      const auto eq = item.find('=');
      rebuilt += (eq == std::string::npos ? item : item.substr(0, eq + 1) + "***");
      if (amp < q.size()) rebuilt += '&';
      pos = amp + 1;
    }
    if (fragment != std::string::npos) rebuilt += out.substr(fragment);
    out = rebuilt;
  }
  return out;
}

}  // namespace lens
