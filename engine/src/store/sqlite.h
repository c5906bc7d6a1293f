// Thin RAII owners for a SQLite connection, a prepared statement and a write transaction. Every failure
// throws deltatune::Error naming the database file and SQLite's message.
#pragma once
#include <cstdint>
#include <string>

struct sqlite3;
struct sqlite3_stmt;

namespace deltatune {

class SqliteDb {
 public:
  // Opens (creating) `path` read-write; busy_timeout_ms makes a writer wait for another writer's lock.
  SqliteDb(const std::string& path, int busy_timeout_ms);
  ~SqliteDb();
  SqliteDb(const SqliteDb&) = delete;
  SqliteDb& operator=(const SqliteDb&) = delete;

  sqlite3* get() const { return db_; }
  const std::string& path() const { return path_; }
  void exec(const std::string& sql);  // one or more statements, no results
  int64_t changes() const;
  [[noreturn]] void fail(const std::string& what) const;  // throws with sqlite3_errmsg

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

class SqliteStmt {
 public:
  SqliteStmt(SqliteDb& db, const std::string& sql);
  ~SqliteStmt();
  SqliteStmt(const SqliteStmt&) = delete;
  SqliteStmt& operator=(const SqliteStmt&) = delete;

  // Parameters are 1-based, as in SQLite.
  SqliteStmt& bind(int i, const std::string& v);
  SqliteStmt& bind(int i, int64_t v);
  SqliteStmt& bind(int i, double v);
  SqliteStmt& bind(int i, int v) { return bind(i, static_cast<int64_t>(v)); }
  SqliteStmt& bind(int i, const char* v) { return bind(i, std::string(v)); }
  // Advances; true while a row is available.
  bool step();
  void run();  // step() expecting no rows
  void reset();
  // Columns are 0-based; NULL reads as "", 0, 0.0.
  std::string text(int col) const;
  int64_t integer(int col) const;
  double real(int col) const;
  bool is_null(int col) const;

 private:
  SqliteDb& db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

// BEGIN IMMEDIATE: takes the write lock up front, so a read-then-write never fails with a stale snapshot
// (SQLITE_BUSY_SNAPSHOT) and waits through busy_timeout instead. Rolls back unless committed.
class SqliteTransaction {
 public:
  explicit SqliteTransaction(SqliteDb& db);
  ~SqliteTransaction();
  SqliteTransaction(const SqliteTransaction&) = delete;
  SqliteTransaction& operator=(const SqliteTransaction&) = delete;
  void commit();

 private:
  SqliteDb& db_;
  bool done_ = false;
};

}  // namespace deltatune
