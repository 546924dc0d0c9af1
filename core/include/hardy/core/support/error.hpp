#pragma once
// One exception hierarchy for all of hardy. Recovery code catches exactly the type it can
// handle: comm::ProcessFailure (declared in comm/) for dead peers, InvalidArgument for bad user
// input (the CLI turns it into exit status 2), everything else is a bug or an environment fault.
#include <cstddef>
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

// One sample of a dataset cannot be used (a missing or mis-shaped dataset in its file, a truncated
// file, non-finite fields, labels outside the classes). Whether that ends the job or only skips
// the sample is the job's policy (--bad-samples), so readers throw this and never decide.
class BadSample : public InvalidArgument {
 public:
  BadSample(std::size_t index, std::string file, const std::string& reason)
      : InvalidArgument(file + ": " + reason), index_(index), file_(std::move(file)) {}
  std::size_t index() const { return index_; }
  const std::string& file() const { return file_; }

 private:
  std::size_t index_;
  std::string file_;
};

// A kernel library (oneDNN, cuDNN, cuBLAS) rejected an operation.
class BackendError : public Error {
 public:
  using Error::Error;
};

}  // namespace hardy
