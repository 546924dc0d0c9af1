#pragma once
// Slurm's hostlist expressions, as in SLURM_JOB_NODELIST: `nid[0001-0004,0007],login1` names
// nid0001 to nid0004, nid0007 and login1.
#include <string>
#include <string_view>
#include <vector>

namespace hardy::slurm {

// Every host name, in order. A bracket group holds numbers and ranges `lo-hi`, written with at
// least as many digits as `lo` (leading zeros kept: [08-10] gives 08, 09, 10). A name with
// several groups expands to their product, the first group varying slowest: a[1-2]b[3-4] gives
// a1b3 a1b4 a2b3 a2b4. Throws InvalidArgument naming the expression for unbalanced or nested
// brackets, an empty name or group entry, a range whose end is below its start, a non-digit in a
// group, or more than a million hosts.
std::vector<std::string> expand_hostlist(std::string_view expression);

}  // namespace hardy::slurm
