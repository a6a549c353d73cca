// Small helpers for absl::Status plumbing (no exceptions anywhere in mxval).
#ifndef MXVAL_COMMON_STATUS_MACROS_H_
#define MXVAL_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MXVAL_CONCAT_INNER_(a, b) a##b
#define MXVAL_CONCAT_(a, b) MXVAL_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define MXVAL_RETURN_IF_ERROR(expr)            \
  do {                                         \
    ::absl::Status _mxval_st = (expr);         \
    if (!_mxval_st.ok()) return _mxval_st;     \
  } while (0)

// `lhs = value of StatusOr expr`, or returns its error.
#define MXVAL_ASSIGN_OR_RETURN(lhs, expr) \
  MXVAL_ASSIGN_OR_RETURN_IMPL_(MXVAL_CONCAT_(_mxval_so_, __LINE__), lhs, expr)
#define MXVAL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#endif  // MXVAL_COMMON_STATUS_MACROS_H_
