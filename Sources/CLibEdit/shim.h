#ifndef LARDER_CLIBEDIT_SHIM_H
#define LARDER_CLIBEDIT_SHIM_H
// libedit (BSD editline) for the `larder` prompt. el_set and history take variable arguments, which Swift cannot
// call, so each use the prompt makes of them is wrapped here with a fixed signature.
#include <stdio.h>
#include <histedit.h>

typedef char *(*larder_prompt_fn)(EditLine *);
typedef unsigned char (*larder_key_fn)(EditLine *, int);

static inline EditLine *larder_el_init(const char *program) {
    return el_init(program, stdin, stdout, stderr);
}
static inline int larder_el_set_prompt(EditLine *el, larder_prompt_fn prompt) {
    return el_set(el, EL_PROMPT, prompt);
}
static inline int larder_el_set_editor(EditLine *el, const char *mode) {
    return el_set(el, EL_EDITOR, mode);
}
static inline int larder_el_set_history(EditLine *el, History *list) {
    return el_set(el, EL_HIST, history, list);
}
/// Through the wide-character API, which keeps `name` and `help` as given (they must outlive the editor): the narrow
/// el_set(EL_ADDFN) copies both with wcsdup, and el_end never frees the copies (LeakSanitizer, RELIABILITY.md).
static inline int larder_el_add_function(EditLine *el, const wchar_t *name, const wchar_t *help,
                                         larder_key_fn function) {
    return el_wset(el, EL_ADDFN, name, help, function);
}
static inline int larder_el_bind(EditLine *el, const char *key, const char *function) {
    return el_set(el, EL_BIND, key, function, (const char *)NULL);
}
/// One `setty` setting for editing mode (`-d`), e.g. "-isig": while a line is edited, Ctrl-C is a key, not a signal.
static inline int larder_el_setty_edit(EditLine *el, const char *setting) {
    return el_set(el, EL_SETTY, "-d", setting, (const char *)NULL);
}
/// Puts the terminal in editing mode now (1) or back (0); el_gets would do it only when it reads the first key, after
/// drawing the prompt.
static inline int larder_el_prepare_terminal(EditLine *el, int editing) {
    return el_set(el, EL_PREP_TERM, editing);
}
static inline int larder_el_set_client_data(EditLine *el, void *data) {
    return el_set(el, EL_CLIENTDATA, data);
}
static inline void *larder_el_client_data(EditLine *el) {
    void *data = NULL;
    el_get(el, EL_CLIENTDATA, &data);
    return data;
}
static inline int larder_history_set_size(History *list, int size) {
    HistEvent event;
    return history(list, &event, H_SETSIZE, size);
}
static inline int larder_history_set_unique(History *list, int unique) {
    HistEvent event;
    return history(list, &event, H_SETUNIQUE, unique);
}
static inline int larder_history_enter(History *list, const char *line) {
    HistEvent event;
    return history(list, &event, H_ENTER, line);
}
#endif
