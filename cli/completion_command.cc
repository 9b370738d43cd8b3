// `cohort completion bash|zsh`: a completion script made from the command
// line's own definition (every subcommand, its flags and the global ones),
// so it never lags behind the commands. Job ids and node names are
// completed by asking the coordinator (`cohort jobs -q`, `cohort nodes -q`,
// at most 2 s); job files and folders from the file system.
//
//   source <(cohort completion bash)      # or save it under bash-completion's completions/cohort
//   source <(cohort completion zsh)       # after compinit; or save it as _cohort on $fpath
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/usage_hints.h"

namespace cohort::cli {
namespace {

// Values worth offering after a flag; other flags' values are file names.
const std::map<std::string, std::string>& flag_choices() {
  static const std::map<std::string, std::string> choices = {
      {"--log-level", "trace debug info warn error off"},
      {"--state", "queued running stopping succeeded failed cancelled"},
      {"--role", "agent client"},
      {"--dtype", "fp32 bf16"},
      {"--format", "auto text jsonl chat prompt_completion"},
  };
  return choices;
}

// What a command's positional argument names, where it is not a file.
const char* positional_kind(const std::string& path) {
  static const std::map<std::string, const char*> kinds = {
      {"status", "jobs"},    {"cancel", "jobs"}, {"logs", "jobs"},         {"jobs rm", "jobs"},
      {"nodes rm", "nodes"}, {"drain", "nodes"}, {"completion", "shells"},
  };
  auto it = kinds.find(path);
  return it == kinds.end() ? "files" : it->second;
}

std::string quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Node {
  std::string path;                                              // "" for the root, "jobs rm"
  std::vector<std::pair<std::string, std::string>> subcommands;  // name, description
  std::vector<std::string> flags, value_flags;
};

void collect(const CLI::App& app, const std::string& path, std::vector<Node>* out) {
  Node node;
  node.path = path;
  // Flags of this command and those it falls through to (the globals).
  for (const CLI::App* a = &app; a; a = a->get_parent()) {
    for (const CLI::Option* opt : a->get_options()) {
      if (opt->get_positional()) continue;
      for (const auto& l : opt->get_lnames()) {
        // The global --json only where the command prints JSON (the root
        // offers it for any); a command's own flag shadows the global one.
        if (l == "json" && app.get_parent() && !prints_json(app)) continue;
        if (std::find(node.flags.begin(), node.flags.end(), "--" + l) != node.flags.end()) continue;
        node.flags.push_back("--" + l);
        if (opt->get_expected_min() > 0) node.value_flags.push_back("--" + l);
      }
      for (const auto& s : opt->get_snames()) {
        if (std::find(node.flags.begin(), node.flags.end(), "-" + s) == node.flags.end())
          node.flags.push_back("-" + s);
      }
    }
  }
  const auto subs = app.get_subcommands([](const CLI::App*) { return true; });
  for (const CLI::App* sub : subs)
    node.subcommands.push_back({sub->get_name(), sub->get_description()});
  out->push_back(node);
  for (const CLI::App* sub : subs)
    collect(*sub, path.empty() ? sub->get_name() : path + " " + sub->get_name(), out);
}

std::string words(const std::vector<std::string>& list) {
  std::string out;
  for (const auto& w : list) out += (out.empty() ? "" : " ") + w;
  return out;
}

// Shell functions both bash and zsh read: the tables the drivers consult.
std::string tables(const std::vector<Node>& nodes) {
  std::string subs, descs, flags, values, kinds;
  for (const auto& n : nodes) {
    std::vector<std::string> names;
    std::string d;
    for (const auto& [name, text] : n.subcommands) {
      names.push_back(name);
      d += (d.empty() ? "" : " ") + quoted(name + ":" + text);
    }
    const std::string label = quoted(n.path);
    if (!names.empty()) subs += "    " + label + ") echo " + quoted(words(names)) + " ;;\n";
    if (!d.empty()) descs += "    " + label + ") _cohort_described=(" + d + ") ;;\n";
    flags += "    " + label + ") echo " + quoted(words(n.flags)) + " ;;\n";
    values += "    " + label + ") echo " + quoted(words(n.value_flags)) + " ;;\n";
    if (!n.path.empty()) kinds += "    " + label + ") echo " + positional_kind(n.path) + " ;;\n";
  }
  std::string choices;
  for (const auto& [flag, list] : flag_choices())
    choices += "    " + flag + ") echo " + quoted(list) + " ;;\n";
  return "_cohort_subcommands() {\n  case \"$1\" in\n" + subs + "  esac\n}\n" +
         "_cohort_descriptions() {\n  _cohort_described=()\n  case \"$1\" in\n" + descs +
         "  esac\n}\n" + "_cohort_flags() {\n  case \"$1\" in\n" + flags + "  esac\n}\n" +
         "_cohort_value_flags() {\n  case \"$1\" in\n" + values + "  esac\n}\n" +
         "_cohort_positional() {\n  case \"$1\" in\n" + kinds +
         "    *) echo files ;;\n  esac\n}\n" + "_cohort_choices() {\n  case \"$1\" in\n" + choices +
         "  esac\n}\n" +
         // The command path: the words before the cursor that name subcommands.
         "_cohort_path() {  # words before the cursor, without the program\n"
         "  local cpath= w\n"
         "  for w in \"$@\"; do\n"
         "    case \"$w\" in -*) continue ;; esac\n"
         "    case \" $(_cohort_subcommands \"$cpath\") \" in *\" $w \"*) cpath=\"${cpath:+$cpath "
         "}$w\" ;; esac\n"
         "  done\n"
         "  echo \"$cpath\"\n"
         "}\n"
         // Job ids and node names from the coordinator; nothing when it is not there.
         "_cohort_ask() {  # program jobs|nodes\n"
         "  if command -v timeout >/dev/null; then timeout 2 \"$1\" \"$2\" -q 2>/dev/null\n"
         "  else \"$1\" \"$2\" -q 2>/dev/null; fi\n"
         "}\n";
}

const char* kBashDriver = R"SH(_cohort() {
  local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
  local cpath; cpath="$(_cohort_path "${COMP_WORDS[@]:1:COMP_CWORD-1}")"
  COMPREPLY=()
  if [[ $prev == -* && " $(_cohort_value_flags "$cpath") " == *" $prev "* ]]; then
    local choices; choices="$(_cohort_choices "$prev")"
    if [[ -n $choices ]]; then COMPREPLY=($(compgen -W "$choices" -- "$cur")); else compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- "$cur")); fi
    return 0
  fi
  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W "$(_cohort_flags "$cpath")" -- "$cur")); return 0; fi
  local subs; subs="$(_cohort_subcommands "$cpath")"
  if [[ -n $subs ]]; then COMPREPLY=($(compgen -W "$subs" -- "$cur")); [[ -n $cpath ]] || return 0; fi
  case "$(_cohort_positional "$cpath")" in
    jobs) COMPREPLY+=($(compgen -W "$(_cohort_ask "${COMP_WORDS[0]}" jobs)" -- "$cur")) ;;
    nodes) COMPREPLY+=($(compgen -W "$(_cohort_ask "${COMP_WORDS[0]}" nodes)" -- "$cur")) ;;
    shells) COMPREPLY+=($(compgen -W "bash zsh" -- "$cur")) ;;
    *) [[ -n $subs ]] || { compopt -o filenames 2>/dev/null; COMPREPLY+=($(compgen -f -- "$cur")); } ;;
  esac
  return 0
}
complete -F _cohort cohort
)SH";

const char* kZshDriver = R"SH(_cohort() {
  local cur="${words[CURRENT]}" prev="${words[CURRENT-1]}"
  local cpath; cpath="$(_cohort_path "${(@)words[2,CURRENT-1]}")"
  if [[ $prev == -* && " $(_cohort_value_flags "$cpath") " == *" $prev "* ]]; then
    local choices; choices="$(_cohort_choices "$prev")"
    if [[ -n $choices ]]; then compadd -- ${=choices}; else _files; fi
    return
  fi
  if [[ $cur == -* ]]; then compadd -- ${=$(_cohort_flags "$cpath")}; return; fi
  local -a _cohort_described
  _cohort_descriptions "$cpath"
  if (( ${#_cohort_described} )); then _describe -t commands 'cohort command' _cohort_described; [[ -n $cpath ]] || return 0; fi
  case "$(_cohort_positional "$cpath")" in
    jobs) compadd -- ${(f)"$(_cohort_ask "${words[1]}" jobs)"} ;;
    nodes) compadd -- ${(f)"$(_cohort_ask "${words[1]}" nodes)"} ;;
    shells) compadd -- bash zsh ;;
    *) (( ${#_cohort_described} )) || _files ;;
  esac
}
if (( $+functions[compdef] )); then compdef _cohort cohort; fi
)SH";

struct CompletionArgs {
  std::string shell;
};

int run_completion(const CLI::App& root, const CompletionArgs& args) {
  std::vector<Node> nodes;
  collect(root, "", &nodes);
  std::string script = args.shell == "zsh" ? "#compdef cohort\n" : "";
  script += "# " + args.shell + " completion for cohort (cohort completion " + args.shell + ")\n";
  script += tables(nodes);
  script += args.shell == "zsh" ? kZshDriver : kBashDriver;
  std::fputs(script.c_str(), stdout);
  return kExitOk;
}

}  // namespace

Command add_completion_command(CLI::App& root) {
  auto args = std::make_shared<CompletionArgs>();
  CLI::App* app =
      root.add_subcommand("completion", "print a shell completion script (bash or zsh)");
  app->add_option("shell", args->shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  const CLI::App* top = &root;
  return {app, [args, top] { return run_completion(*top, *args); }};
}

}  // namespace cohort::cli
