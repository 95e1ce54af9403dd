// An output written all or nothing. Bytes go to PATH.tmp (created afresh,
// which also clears what a killed run left there); commit() flushes it to the
// disk (fsync), renames it over PATH and flushes the folder, so PATH holds the
// previous complete file or the new complete file, never a part, whatever
// happens to the process (kill -9) or the machine. Destroyed without
// commit(), it removes the temporary file. Errors name the path.
#pragma once

#include <cstddef>
#include <string>

namespace qlens {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // `what` names the bytes in an error ("tensor 'output.weight'").
  void write(const void* data, size_t n, const std::string& what);
  void commit();

  const std::string& temp_path() const { return tmp_; }

 private:
  [[noreturn]] void fail(const std::string& what);

  std::string path_, tmp_;
  int fd_ = -1;
};

}  // namespace qlens
