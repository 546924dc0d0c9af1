#pragma once
// Batch-script templates: text with {{name}} placeholders, rendered into the script that
// `hardy submit` hands to sbatch or bsub. The built-in templates live with their schedulers
// (slurm/, lsf/); users can give their own with `hardy submit --template FILE`.
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace hardy::batch {

// Every placeholder a template may use, each with a value or nullopt for a setting that was not
// given (an optional one such as --account). A name missing from the map is unknown.
using TemplateValues = std::map<std::string, std::optional<std::string>>;

// Replaces each {{name}} with its value as one complete word: in a directive line (one that
// starts with `directive_prefix`, e.g. "#SBATCH") through directive_value(), anywhere else
// through shell_quote(), so a placeholder must not sit inside quotes of its own. A directive
// line that uses a setting that was not given is left out, so `#SBATCH --account={{account}}`
// disappears without --account. Throws InvalidArgument naming `source` (the template file, or
// "the built-in slurm template") and the line for an unknown placeholder (listing the known
// ones), a "{{" without "}}", a setting that was not given used outside a directive line, and a
// value a directive cannot hold.
std::string render_script(std::string_view text, const TemplateValues& values,
                          std::string_view directive_prefix, std::string_view source);

}  // namespace hardy::batch
