// Private: what the dashboard's two pages share: escaping, the page frame
// and its stylesheet, time and number formats.
#pragma once

#include <cstdint>
#include <string>

namespace cohort::coordinator::html {

std::string escape(const std::string& s);
// "2026-12-01 08:20:22" (UTC); "" for 0.
std::string clock(int64_t unix_ms);
// "45 s", "12 min 3 s", "2 h 5 min".
std::string duration(int64_t ms);
// A state as a coloured badge.
std::string badge(const std::string& state);
// <!doctype html> … <main id="live"> opened; `script` goes at the end.
std::string page_start(const std::string& title);
std::string page_end(const std::string& script);
// Defines cohortRefresh(ms): re-fetches the page every `ms` and swaps every
// [data-live] element in place (a scroll position or an open <select>
// survives); it stops once the page has an element with id `final`.
extern const char* const kRefreshScript;

}  // namespace cohort::coordinator::html
