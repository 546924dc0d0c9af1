#include <catch2/catch.hpp>

#include "hardy/batch/script_template.hpp"
#include "hardy/core/support/error.hpp"

using hardy::InvalidArgument;
using hardy::batch::render_script;
using hardy::batch::TemplateValues;

namespace {

const TemplateValues kValues = {
    {"job_name", "my job"}, {"run_dir", "/runs/o'neil"}, {"nodes", "4"}, {"account", std::nullopt}};

std::string render(const std::string& text) {
  return render_script(text, kValues, "#SBATCH", "test.tmpl");
}

}  // namespace

TEST_CASE("placeholders are quoted for the line they are in", "[batch]") {
  CHECK(render("#SBATCH --job-name={{job_name}}\n") == "#SBATCH --job-name=\"my job\"\n");
  CHECK(render("echo {{job_name}} {{run_dir}}\n") == "echo 'my job' '/runs/o'\\''neil'\n");
  CHECK(render("#SBATCH --nodes={{nodes}}\nsrun -N {{nodes}} x\n") ==
        "#SBATCH --nodes=4\nsrun -N 4 x\n");
}

TEST_CASE("a directive line naming an unset optional setting is left out", "[batch]") {
  CHECK(render("#SBATCH --nodes={{nodes}}\n#SBATCH --account={{account}}\necho hi\n") ==
        "#SBATCH --nodes=4\necho hi\n");
}

TEST_CASE("an unset optional setting outside a directive is an error", "[batch]") {
  CHECK_THROWS_WITH(
      render("a\necho {{account}}\n"),
      Catch::Contains("test.tmpl line 2") && Catch::Contains("{{account}} has no value"));
}

TEST_CASE("an unknown placeholder names itself, the line and the known ones", "[batch]") {
  CHECK_THROWS_WITH(render("#SBATCH --x={{nodez}}\n"),
                    Catch::Contains("test.tmpl line 1") && Catch::Contains("{{nodez}}") &&
                        Catch::Contains("job_name nodes run_dir"));
}

TEST_CASE("an unclosed placeholder is an error", "[batch]") {
  CHECK_THROWS_AS(render("echo {{nodes\n"), InvalidArgument);
}

TEST_CASE("a value a directive cannot hold is an error naming the line", "[batch]") {
  const TemplateValues bad = {{"job_name", "a\"b"}};
  CHECK_THROWS_WITH(render_script("#BSUB -J {{job_name}}\n", bad, "#BSUB", "t"),
                    Catch::Contains("t line 1") && Catch::Contains("{{job_name}}"));
}

TEST_CASE("text without placeholders, CRLF line ends and a missing last newline", "[batch]") {
  CHECK(render("#!/bin/bash\r\necho $HOME {x}") == "#!/bin/bash\necho $HOME {x}\n");
}
