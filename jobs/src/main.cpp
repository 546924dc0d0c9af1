#include "hardy/jobs/commands.hpp"

int main(int argc, char** argv) { return hardy::jobs::run_cli(argc, argv); }
