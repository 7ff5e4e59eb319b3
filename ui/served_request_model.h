// ServedRequestModel: the Server panel's requests log as a table — one row per request the app's
// server answered (LocalServer::requests()), newest first, at most LocalServer::kLogLimit rows:
// time, client, route, model, prompt and completion tokens, status, duration, TTFT (streaming
// completions). It keeps its own copy of the rows and follows the server's requestsLogged /
// requestsCleared signals with row inserts and removals, never a reset while rows arrive.
#pragma once

#include "local_server.h"

#include <QAbstractTableModel>
#include <QPointer>

namespace es {

class ServedRequestModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Time, Client, Route, Model, PromptTokens, CompletionTokens, Status, Duration, Ttft, ColumnCount };

    explicit ServedRequestModel(LocalServer *server, QObject *parent = nullptr);

    int rowCount(const QModelIndex &parent = {}) const override;
    int columnCount(const QModelIndex &parent = {}) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
    const ServedRequest &request(int row) const { return m_rows.at(row); }

private:
    void onLogged(int added, int dropped);

    QPointer<LocalServer> m_server;
    QList<ServedRequest> m_rows;
};

} // namespace es
