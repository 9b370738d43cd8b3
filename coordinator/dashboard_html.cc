#include "coordinator/dashboard_html.h"

#include <ctime>

#include <fmt/format.h>

namespace cohort::coordinator::html {

std::string escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string clock(int64_t unix_ms) {
  if (unix_ms <= 0) return "";
  std::time_t t = std::time_t(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}:{:02}", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::string duration(int64_t ms) {
  int64_t s = ms < 0 ? 0 : ms / 1000;
  if (s < 60) return fmt::format("{} s", s);
  if (s < 3600) return fmt::format("{} min {} s", s / 60, s % 60);
  return fmt::format("{} h {} min", s / 3600, s % 3600 / 60);
}

std::string badge(const std::string& state) {
  return "<span class=\"badge " + escape(state) + "\">" + escape(state) + "</span>";
}

// Muted colours that read on white; states share them with the badges.
constexpr const char* kStyle = R"css(
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1f2328;background:#f6f8fa}
header{background:#24292f;color:#fff;padding:8px 20px;display:flex;gap:16px;align-items:baseline}
header a{color:#fff;text-decoration:none;font-weight:600;font-size:18px}header span{color:#9da7b3}
main{padding:8px 20px 24px;max-width:1200px}
h2{font-size:16px;margin:20px 0 6px}
table{border-collapse:collapse;background:#fff;border:1px solid #d0d7de;min-width:40%}
th,td{padding:4px 10px;text-align:left;border-bottom:1px solid #eaeef2;vertical-align:top}
th{background:#f6f8fa;font-weight:600}td.num{text-align:right;font-variant-numeric:tabular-nums}
a{color:#0969da}
.badge{display:inline-block;padding:0 8px;border-radius:10px;font-size:12px;font-weight:600;background:#eaeef2}
.running,.alive{background:#dafbe1;color:#1a7f37}.queued,.stopping,.unconfirmed,.draining,.starting{background:#fff8c5;color:#9a6700}
.failed,.lost{background:#ffebe9;color:#cf222e}.succeeded,.exited{background:#ddf4ff;color:#0969da}
.cancelled,.stopped,.drained,.left{background:#eaeef2;color:#57606a}
.rootcause{background:#fff;border:1px solid #cf222e;border-left:4px solid #cf222e;padding:8px 12px;max-width:900px}
pre{background:#0d1117;color:#e6edf3;padding:8px 10px;font-size:12px;overflow:auto;max-height:360px;margin:0}
.rootcause pre{max-height:200px}
.charts{display:flex;flex-wrap:wrap;gap:10px}
.chart{background:#fff;border:1px solid #d0d7de}.chart .frame{fill:none;stroke:#d0d7de}
.chart .grid{stroke:#eaeef2}.chart .tick{font-size:10px;fill:#57606a}.chart .ct{font-size:13px;font-weight:600}
.chart .legend{font-size:11px}.chart .empty{fill:#8c959f;font-size:12px}
.chart .line{fill:none;stroke-width:1.6}
.bar{height:6px;background:#eaeef2;border-radius:3px;width:90px;display:inline-block;vertical-align:middle}
.bar>span{display:block;height:6px;background:#2da44e;border-radius:3px}
.muted{color:#57606a}.toolbar{margin:6px 0}.toolbar a,.toolbar select{margin-right:8px}
button.cancel{background:#cf222e;color:#fff;border:0;border-radius:6px;padding:4px 12px;cursor:pointer}
)css";

const char* const kRefreshScript = R"js(
function cohortRefresh(ms){const t=setInterval(async()=>{try{
const r=await fetch(location.href,{cache:'no-store'});if(!r.ok)return;
const d=new DOMParser().parseFromString(await r.text(),'text/html');
for(const el of d.querySelectorAll('[data-live]')){const o=document.getElementById(el.id);if(o)o.replaceWith(el);}
if(document.getElementById('final'))clearInterval(t);
}catch(e){}},ms);}
)js";

std::string page_start(const std::string& title) {
  return "<!doctype html><html lang=en><head><meta charset=utf-8><title>" + escape(title) +
         "</title><meta name=viewport content=\"width=device-width\">"
         "<noscript><meta http-equiv=refresh content=5></noscript><style>" +
         kStyle + "</style></head><body><header><a href=\"/\">cohort</a><span>" + escape(title) +
         "</span></header><main>";
}

std::string page_end(const std::string& script) {
  return "</main>" + (script.empty() ? std::string() : "<script>" + script + "</script>") + "</body></html>";
}

}  // namespace cohort::coordinator::html
