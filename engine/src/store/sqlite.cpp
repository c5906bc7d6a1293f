#include "store/sqlite.h"

#include <sqlite3.h>

#include "core/error.h"

namespace deltatune {

SqliteDb::SqliteDb(const std::string& path, int busy_timeout_ms) : path_(path) {
  const int rc = sqlite3_open_v2(path.c_str(), &db_,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    const std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw Error("experiment database '" + path + "': cannot open (" + msg + ")");
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, busy_timeout_ms);
}

SqliteDb::~SqliteDb() {
  // close_v2 defers the close until every statement is finalized, so order of destruction is not fragile.
  if (db_) sqlite3_close_v2(db_);
}

void SqliteDb::fail(const std::string& what) const {
  throw Error("experiment database '" + path_ + "': " + what + " failed (" + sqlite3_errmsg(db_) + ")");
}

void SqliteDb::exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    const std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw Error("experiment database '" + path_ + "': " + msg + " (in: " + sql.substr(0, 80) + ")");
  }
}

int64_t SqliteDb::changes() const {
  return sqlite3_changes(db_);
}

SqliteStmt::SqliteStmt(SqliteDb& db, const std::string& sql) : db_(db), sql_(sql) {
  if (sqlite3_prepare_v2(db.get(), sql.c_str(), static_cast<int>(sql.size()), &stmt_, nullptr) != SQLITE_OK)
    db.fail("preparing '" + sql.substr(0, 80) + "'");
}

SqliteStmt::~SqliteStmt() {
  sqlite3_finalize(stmt_);
}

SqliteStmt& SqliteStmt::bind(int i, const std::string& v) {
  if (sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT) != SQLITE_OK)
    db_.fail("binding a parameter");
  return *this;
}

SqliteStmt& SqliteStmt::bind(int i, int64_t v) {
  if (sqlite3_bind_int64(stmt_, i, v) != SQLITE_OK) db_.fail("binding a parameter");
  return *this;
}

SqliteStmt& SqliteStmt::bind(int i, double v) {
  if (sqlite3_bind_double(stmt_, i, v) != SQLITE_OK) db_.fail("binding a parameter");
  return *this;
}

bool SqliteStmt::step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  db_.fail(sql_.substr(0, 80).insert(0, "statement "));  // (not "'" + ...: GCC 12 -Wrestrict false alarm)
}

void SqliteStmt::run() {
  while (step()) {
  }
}

void SqliteStmt::reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

std::string SqliteStmt::text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, col))) : std::string();
}

int64_t SqliteStmt::integer(int col) const {
  return sqlite3_column_int64(stmt_, col);
}
double SqliteStmt::real(int col) const {
  return sqlite3_column_double(stmt_, col);
}
bool SqliteStmt::is_null(int col) const {
  return sqlite3_column_type(stmt_, col) == SQLITE_NULL;
}

SqliteTransaction::SqliteTransaction(SqliteDb& db) : db_(db) {
  db_.exec("BEGIN IMMEDIATE");
}

SqliteTransaction::~SqliteTransaction() {
  if (!done_) sqlite3_exec(db_.get(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void SqliteTransaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace deltatune
