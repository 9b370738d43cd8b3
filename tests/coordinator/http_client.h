// A blocking HTTP client for the coordinator's HTTP tests: one request per
// connection, as the server answers.
#pragma once

#include <map>
#include <string>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace cohort::coordinator::testing {

namespace beast = boost::beast;
namespace http = beast::http;
using tcp = boost::asio::ip::tcp;

struct HttpReply {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // the ones tests look at
};

inline HttpReply http_call(int port, http::verb verb, const std::string& target, const std::string& token = "",
                           const std::string& cookie = "", const std::map<std::string, std::string>& headers = {},
                           const std::string& body = "") {
  boost::asio::io_context io;
  tcp::socket socket(io);
  socket.connect(tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), uint16_t(port)));
  http::request<http::string_body> req(verb, target, 11);
  req.set(http::field::host, "localhost");
  if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
  if (!cookie.empty()) req.set(http::field::cookie, cookie);
  for (const auto& [name, value] : headers) req.set(name, value);
  req.body() = body;
  req.prepare_payload();
  http::write(socket, req);
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  beast::error_code ec;
  http::read(socket, buffer, res, ec);
  HttpReply out{int(res.result_int()), res.body(), {}};
  for (auto field : {http::field::set_cookie, http::field::location, http::field::content_type}) {
    if (res.count(field)) out.headers[std::string(http::to_string(field))] = std::string(res[field]);
  }
  return out;
}

}  // namespace cohort::coordinator::testing
