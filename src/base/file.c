/* base/file.c — O_NONBLOCK open + fstat + S_ISREG + size cap, then a bounded read. */
#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int file_open_regular(const char *path, uint64_t max_bytes, int *fd, size_t *size, struct hearth_err *err) {
  *fd = -1;
  *size = 0;
  /* O_NONBLOCK: opening a FIFO for reading otherwise waits for a writer, forever */
  int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (f < 0) return err_set(err, HEARTH_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  struct stat sb;
  if (fstat(f, &sb) < 0) {
    int e = errno;
    close(f);
    return err_set(err, HEARTH_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(sb.st_mode)) {
    close(f);
    return err_set(err, HEARTH_ERR_IO, "%s: not a regular file (%s)", path,
                   S_ISFIFO(sb.st_mode) ? "a FIFO" : S_ISCHR(sb.st_mode) ? "a character device"
                   : S_ISBLK(sb.st_mode) ? "a block device" : S_ISDIR(sb.st_mode) ? "a directory"
                   : S_ISSOCK(sb.st_mode) ? "a socket" : "not a plain file");
  }
  if (sb.st_size < 0 || (uint64_t)sb.st_size > max_bytes || (uint64_t)sb.st_size > SIZE_MAX / 2) {
    close(f);
    return err_set(err, HEARTH_ERR_FORMAT, "%s: %lld bytes exceeds the %llu-byte limit for this kind of file",
                   path, (long long)sb.st_size, (unsigned long long)max_bytes);
  }
  int fl = fcntl(f, F_GETFL);
  if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) < 0) {
    int e = errno;
    close(f);
    return err_set(err, HEARTH_ERR_IO, "%s: fcntl: %s", path, strerror(e));
  }
  *fd = f;
  *size = (size_t)sb.st_size;
  return 0;
}

int file_read_all(const char *path, uint64_t max_bytes, char **buf, size_t *len, struct hearth_err *err) {
  *buf = NULL;
  *len = 0;
  int fd;
  size_t size;
  int rc = file_open_regular(path, max_bytes, &fd, &size, err);
  if (rc) return rc;
  char *b = malloc(size + 1);
  if (!b) {
    close(fd);
    return err_set(err, HEARTH_ERR_NOMEM, "%s: out of memory for %zu bytes", path, size);
  }
  /* read at most the size fstat reported: a file that grows meanwhile cannot overrun the cap */
  size_t n = 0;
  while (n < size) {
    ssize_t r = read(fd, b + n, size - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      free(b);
      return err_set(err, HEARTH_ERR_IO, "%s: read failed: %s", path, strerror(e));
    }
    if (r == 0) break; /* shrank meanwhile: what is there */
    n += (size_t)r;
  }
  close(fd);
  b[n] = 0;
  *buf = b;
  *len = n;
  return 0;
}

int file_exists(const char *path) {
  struct stat sb;
  return stat(path, &sb) == 0;
}
