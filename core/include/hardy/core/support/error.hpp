#pragma once
// One exception hierarchy for all of hardy. Recovery code catches exactly the type it can
// handle: comm::ProcessFailure (declared in comm/) for dead peers, InvalidArgument for bad user
// input (the CLI turns it into exit status 2), everything else is a bug or an environment fault.
#include <stdexcept>
#include <string>

namespace hardy {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Bad user input: an option, a configuration value, a file that is not what it should be.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A file or directory could not be read or written (disk full, permissions, damaged file).
class IoError : public Error {
 public:
  using Error::Error;
};

// A kernel library (oneDNN, cuDNN, cuBLAS) rejected an operation.
class BackendError : public Error {
 public:
  using Error::Error;
};

}  // namespace hardy
