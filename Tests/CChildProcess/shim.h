// glibc's posix_spawn extensions that Swift's Glibc module does not show (they need _GNU_SOURCE), declared here as
// glibc 2.34 and later define them: the tests' ChildProcess closes the parent's descriptors and changes directory in
// the child with them.
#include <spawn.h>

extern int posix_spawn_file_actions_addclosefrom_np(posix_spawn_file_actions_t *actions, int from);
extern int posix_spawn_file_actions_addchdir_np(posix_spawn_file_actions_t *actions, const char *path);
