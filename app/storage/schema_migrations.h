// The chat database's schema history: one function per version, applied in order, each inside
// the transaction ChatStore opens for it (which also sets PRAGMA user_version). A released
// migration is frozen: never edit one, append a new version instead. tests/test_chat_store.cpp
// keeps a frozen copy of every old schema and migrates each to the latest.
// Internal to es_storage; only ChatStore calls it.
#pragma once

#include <QList>
#include <QSqlDatabase>
#include <QString>

namespace es::schema {

struct Migration {
    int version;         // user_version after this step
    const char *summary; // for logs and error messages
    // Runs the step's statements on db inside an open transaction. On failure returns false
    // and sets *error to the statement's SQLite error; the caller rolls back.
    bool (*apply)(QSqlDatabase &db, QString *error);
};

// Every step, oldest first; versions are 1, 2, … without gaps.
const QList<Migration> &migrations();
int latestVersion();

} // namespace es::schema
