/* load/hub_files.h — which files of a Hub repository hearth pulls, and which names it refuses.
 * A name comes from the network (the revision's file list, model.safetensors.index.json): it is
 * only ever used below snapshots/<commit>/ after hub_name_safe accepted it. */
#ifndef HEARTH_LOAD_HUB_FILES_H
#define HEARTH_LOAD_HUB_FILES_H

/* 1 when a repository file name is one inference needs: config.json, generation_config.json,
 * top-level *.safetensors and model.safetensors.index.json, tokenizer.json, tokenizer_config.json,
 * chat_template.jinja / .json, and the sentence-transformers files (modules.json,
 * config_sentence_transformers.json, sentence_bert_config.json, 1_Pooling/config.json). */
int hub_file_wanted(const char *name);

/* 1 when name's last component (after '/' or '\\') is one hub_file_wanted would take, whatever the
 * folders before it: such a name is refused outright when it is not safe, not silently skipped. */
int hub_file_looks_wanted(const char *name);

/* 1 when name is a relative path of plain components: not empty, not absolute, no backslash, no
 * empty, "." or ".." component, no control character, at most 255 bytes. */
int hub_name_safe(const char *name);

/* 1 when s is a repo id ORG/NAME as the Hub allows them: [A-Za-z0-9._-], no "--" or "..", neither
 * part starting or ending with '.' or '-', at most 96 bytes each. */
int hub_repo_id_valid(const char *s);

/* 1 when s is a revision hearth accepts (a branch, tag or commit): hub_name_safe, and only
 * [A-Za-z0-9._/-]. */
int hub_revision_valid(const char *s);
#endif
