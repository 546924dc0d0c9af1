#pragma once
// Putting user-given text (job names, paths) into a batch script safely. A script has two kinds
// of lines: shell lines, where any text can be quoted, and scheduler directives (#SBATCH,
// #BSUB), which the scheduler parses with its own rules before any shell sees the script.
#include <string>
#include <string_view>

namespace hardy::batch {

// `word` as one POSIX shell word: unchanged when it holds only characters no shell treats
// specially (letters, digits and _ - . / : = @ + ,), otherwise in single quotes, where nothing is
// special, with each ' written as '\''. Spaces, $( ), backticks and newlines are all safe.
std::string shell_quote(std::string_view word);

// `value` as the value of a scheduler directive, in double quotes when it contains spaces (Slurm
// and LSF both strip them). There is no escaping inside a directive, so text that would end or
// change it is refused: throws InvalidArgument naming `what` and the character for control
// characters (newlines included), '"', '\', '%' (Slurm and LSF expand %j/%J in file names), and
// '$' and '`' (which some schedulers expand). Empty values are refused too.
std::string directive_value(std::string_view value, std::string_view what);

}  // namespace hardy::batch
