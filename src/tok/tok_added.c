/* tok/tok_added.c — the added-token tries: a byte trie per class (normalized=false tokens are
 * matched on the raw text, normalized=true tokens on the normalized text), searched
 * leftmost-longest like HF's Aho-Corasick (MatchKind::LeftmostLongest). The split itself, with
 * lstrip/rstrip/single_word, is in tok_encode.c. */
#include <stdlib.h>
#include <string.h>

#include "tok/tok_internal.h"

static int32_t new_node(struct tok_trie *t, uint8_t byte) {
  if (t->n == t->cap) {
    int32_t cap = t->cap ? t->cap * 2 : 256;
    struct tok_trie_node *p = realloc(t->nodes, (size_t)cap * sizeof *p);
    if (!p) return -1;
    t->nodes = p, t->cap = cap;
  }
  struct tok_trie_node *nd = &t->nodes[t->n];
  nd->first_child = nd->next_sibling = nd->added = -1;
  nd->byte = byte;
  return t->n++;
}

int tok_trie_add(struct tok_trie *t, const char *s, size_t n, int32_t added_index) {
  if (!t->nodes) {
    for (int i = 0; i < 256; i++) t->root_child[i] = -1;
    if (new_node(t, 0) < 0) return -1;
  }
  const unsigned char *u = (const unsigned char *)s;
  int32_t cur = t->root_child[u[0]];
  if (cur < 0) {
    if ((cur = new_node(t, u[0])) < 0) return -1;
    t->root_child[u[0]] = cur;
  }
  for (size_t i = 1; i < n; i++) {
    int32_t c = t->nodes[cur].first_child;
    while (c >= 0 && t->nodes[c].byte != u[i]) c = t->nodes[c].next_sibling;
    if (c < 0) {
      if ((c = new_node(t, u[i])) < 0) return -1;
      t->nodes[c].next_sibling = t->nodes[cur].first_child;
      t->nodes[cur].first_child = c;
    }
    cur = c;
  }
  /* the same content twice: HF keeps the first token for the pattern */
  if (t->nodes[cur].added < 0) t->nodes[cur].added = added_index;
  return 0;
}

void tok_trie_free(struct tok_trie *t) {
  free(t->nodes);
  t->nodes = NULL;
  t->n = t->cap = 0;
}
