// Prints the step a hardy checkpoint was written at, through the installed hardy::checkpoint.
#include <iostream>

#include "hardy/checkpoint/checkpoint_file.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: checkpoint_step FILE\n";
    return 2;
  }
  try {
    const auto contents = hardy::checkpoint::read_checkpoint_file(argv[1]);
    std::cout << "step " << contents.state.step << "\n";
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
