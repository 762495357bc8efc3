#include "json_lines_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace lens::detail {

int open_json_lines_file(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  // A file we may write but not read: append without the torn-line check.
  if (fd < 0 && errno == EACCES) return ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st {};
  char last = '\n';
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
      ::pread(fd, &last, 1, st.st_size - 1) == 1 && last != '\n') {
    if (const int error = append_json_line(fd, "\n"); error != 0) {
      ::close(fd);
      errno = error;
      return -1;
    }
  }
  return fd;
}

int append_json_line(int fd, std::string_view line) {
  // Where this line begins (O_APPEND writes at the end), to cut a partial
  // line off again; -1 for a descriptor that cannot seek.
  const off_t start = ::lseek(fd, 0, SEEK_END);
  const char* p = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      if (left < line.size() && start >= 0) (void)::ftruncate(fd, start);
      return error;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return 0;
}

}  // namespace lens::detail
