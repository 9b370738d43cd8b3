// Log lines about bad input from peers, truncated and rate-limited.
//
// A peer controls what it sends; logging it in full let 20 messages of 8 MB
// grow the log by 160 MB in 3 s. Every such line goes through here: at most
// kMaxInputLogBytes of the peer's text, at most kInputLogBurst lines per
// second (the rest are counted and summed up in the next line that passes).
//
// Thread-safe (agents log from store-server threads too).
#pragma once

#include <string>
#include <string_view>

namespace cohort::protocol {

inline constexpr size_t kMaxInputLogBytes = 200;
inline constexpr int kInputLogBurst = 20;

// `text` cut to `max_bytes`, with "… (N bytes)" when it was longer.
std::string shorten(std::string_view text, size_t max_bytes = kMaxInputLogBytes);

// Logs a warning (shortened, rate-limited); returns false when suppressed.
bool warn_bad_input(std::string_view text);

}  // namespace cohort::protocol
