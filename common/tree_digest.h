// The identity of a Python kernel library: a SHA-256 over the files of its
// directory tree, and a copy that hashes exactly the bytes it writes, so a
// worker imports the bytes that were registered (kernels/python/README.md).
//
// The tree. Every regular file under the root, except
//   - anything under a directory named `__pycache__` or `.git` (at any depth),
//   - regular files whose name ends in `.pyc`.
// Any other entry that is neither a regular file nor a directory (a symlink, a
// FIFO, a socket, a device) makes the tree invalid: nothing inside the root is
// followed, so what is hashed is what a copy of the tree holds. The root path
// itself is the caller's and is opened normally. Empty directories hold no
// files and are neither hashed nor copied.
//
// The digest. Files are ordered by their relative path ('/'-separated, no
// leading "./") compared bytewise; for each file in that order the hash takes
//   path bytes, 0x00, the size in bytes as decimal ASCII, 0x00, the file's bytes.
// Paths hold no NUL and the size says where the bytes end, so the encoding is
// prefix-free: moving a byte between a name and its contents, or a name's
// character across a '/' ("a/bc" vs "ab/c"), changes the digest.
// The same in Python (valid trees; tree_digest_test checks the two agree):
//
//   import hashlib, os
//   def tree_sha256(root):
//       root, h, files = os.fsencode(root), hashlib.sha256(), []
//       for d, dirs, names in os.walk(root):
//           dirs[:] = [x for x in dirs if x not in (b"__pycache__", b".git")]
//           files += [os.path.relpath(os.path.join(d, n), root) for n in names if not n.endswith(b".pyc")]
//       for p in sorted(files):
//           data = open(os.path.join(root, p), "rb").read()
//           h.update(p + b"\0" + str(len(data)).encode() + b"\0" + data)
//       return h.hexdigest()
#ifndef MXVAL_COMMON_TREE_DIGEST_H_
#define MXVAL_COMMON_TREE_DIGEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mxval {

// Bounds on a tree, checked while it is walked (a hostile tree cannot make a
// walk or a copy unbounded).
struct TreeLimits {
  int64_t max_files = 20000;                     // files hashed (excluded ones do not count)
  int64_t max_dirs = 20000;                      // directories walked (excluded ones do not count)
  int64_t max_total_bytes = int64_t{512} << 20;  // sum of the hashed files' sizes
  int64_t max_path_bytes = 1024;                 // length of any relative path in the tree
};

struct TreeFile {
  std::string path;  // relative, '/'-separated
  int64_t size = 0;  // bytes, as listed
};

struct TreeListing {
  std::vector<TreeFile> files;  // sorted bytewise by path
  int64_t total_bytes = 0;
};

// The files of the tree at `dir` (see above), sorted.
// NOT_FOUND if `dir` does not exist or is not a directory;
// INVALID_ARGUMENT naming the relative path of a symlink or other
// non-regular entry, or of a path longer than limits.max_path_bytes;
// RESOURCE_EXHAUSTED if the tree has more files, directories or bytes than
// `limits` allow; ABORTED if an entry vanishes or changes type while the
// tree is walked;
// UNAVAILABLE if reading a directory fails.
absl::StatusOr<TreeListing> ListTree(const std::string& dir, const TreeLimits& limits = {});

// Lowercase hex SHA-256 of the tree at `dir` (definition above).
// Every error of ListTree; ABORTED if the tree changes while it is read (a
// listed file vanishes, changes type, or does not hold as many bytes as its
// size said when opened); UNAVAILABLE if reading a file fails.
absl::StatusOr<std::string> TreeSha256(const std::string& dir, const TreeLimits& limits = {});

// Copies the tree at `src` to `dst` and returns the digest of the bytes it
// copied, which equals `expected_sha256`. Each source file is opened once
// (O_NOFOLLOW, by a descriptor walk from the root that follows no symlink)
// and read once; the bytes read are both hashed and written, so the digest
// covers exactly what `dst` holds, whatever happens to `src` meanwhile.
// `dst` must not exist or be an empty directory; it becomes mode 0700, its
// directories 0755 and its files 0644. Once `dst` is taken, any error removes
// it (an existing empty directory included): a failed copy never leaves a
// tree to import. Errors before that leave `dst` as it was.
// INVALID_ARGUMENT if `expected_sha256` is not 64 lowercase hex digits;
// ALREADY_EXISTS if `dst` exists and is not an empty directory (a symlink
// to one included);
// PERMISSION_DENIED, naming both digests, if the copied bytes' digest differs
// from `expected_sha256` (the only use of PERMISSION_DENIED here);
// every error of TreeSha256 (for `src`); UNAVAILABLE if creating or writing
// `dst` fails.
absl::StatusOr<std::string> CopyVerifiedTree(const std::string& src, const std::string& dst,
                                             const std::string& expected_sha256, const TreeLimits& limits = {});

}  // namespace mxval

#endif  // MXVAL_COMMON_TREE_DIGEST_H_
