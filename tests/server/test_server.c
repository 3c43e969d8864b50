/* tests/server/test_server.c — unit groups for server pieces that need no live server.
 *   scrub: errors_scrub hides directory parts of absolute paths in client-facing messages and
 *          leaves everything else (routes, ratios, short paths) as it was. */
#include <string.h>

#include "server/errors.h"
#include "test.h"

static void check_scrub(const char *in, const char *want) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s", in);
  errors_scrub(buf);
  CHECKF(!strcmp(buf, want), "scrub(\"%s\") = \"%s\", want \"%s\"", in, buf, want);
}

TEST_GROUP(scrub) {
  check_scrub("/home/alice/models/Qwen/tokenizer.json: line 3: bad", ".../tokenizer.json: line 3: bad");
  check_scrub("model /srv/m/qwen: no config.json", "model .../qwen: no config.json");
  check_scrub("cannot open '/var/lib/x/chat_template.jinja'", "cannot open '.../chat_template.jinja'");
  check_scrub("a (/opt/data/file) b", "a (.../file) b");
  check_scrub("dir=/usr/local/share/x,y", "dir=.../x,y");
  check_scrub("two: /a/bb/c and /ddd/e", "two: .../c and .../e");
  check_scrub("no path here", "no path here");
  check_scrub("ratio 1/2 and a/b/c", "ratio 1/2 and a/b/c"); /* not at a word start */
  check_scrub("/short", "/short");                          /* no directory part */
  check_scrub("/a/b", "/a/b");                              /* directory too short to shorten */
  check_scrub("", "");
  /* a message made only of slashes never grows */
  char buf[64];
  memset(buf, '/', 63);
  buf[63] = 0;
  errors_scrub(buf);
  CHECK(strlen(buf) <= 63);
}

TEST_MAIN(T(scrub))
