// ServedRequestModel (see served_request_model.h).
#include "served_request_model.h"

#include <QBrush>
#include <QColor>
#include <QLocale>

namespace es {

ServedRequestModel::ServedRequestModel(LocalServer *server, QObject *parent)
    : QAbstractTableModel(parent), m_server(server) {
    if (!server) return;
    m_rows = server->requests();
    connect(server, &LocalServer::requestsLogged, this, &ServedRequestModel::onLogged);
    connect(server, &LocalServer::requestsCleared, this, [this] {
        beginResetModel();
        m_rows.clear();
        endResetModel();
    });
}

// The server's log gained `added` rows at its top and lost `dropped` at its end.
void ServedRequestModel::onLogged(int added, int dropped) {
    if (!m_server) return;
    const QList<ServedRequest> &log = m_server->requests();
    added = std::min(added, int(log.size()));
    if (added > 0) {
        beginInsertRows({}, 0, added - 1);
        m_rows = log.mid(0, added) + m_rows;
        endInsertRows();
    }
    // The log keeps its newest rows: what it lost at its end goes here too.
    dropped = std::max(0, int(m_rows.size() - log.size()));
    if (dropped > 0) {
        beginRemoveRows({}, int(m_rows.size()) - dropped, int(m_rows.size()) - 1);
        m_rows.resize(m_rows.size() - dropped);
        endRemoveRows();
    }
}

int ServedRequestModel::rowCount(const QModelIndex &parent) const { return parent.isValid() ? 0 : int(m_rows.size()); }

int ServedRequestModel::columnCount(const QModelIndex &parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant ServedRequestModel::headerData(int section, Qt::Orientation orientation, int role) const {
    if (orientation != Qt::Horizontal) return {};
    if (role == Qt::DisplayRole) {
        switch (Column(section)) {
        case Time: return tr("Time");
        case Client: return tr("Client");
        case Route: return tr("Route");
        case Model: return tr("Model");
        case PromptTokens: return tr("Prompt");
        case CompletionTokens: return tr("Completion");
        case Status: return tr("Status");
        case Duration: return tr("Duration");
        case Ttft: return tr("TTFT");
        case ColumnCount: break;
        }
    } else if (role == Qt::ToolTipRole) {
        switch (Column(section)) {
        case PromptTokens: return tr("Prompt tokens of a completion (the chat template applied)");
        case CompletionTokens: return tr("Tokens the model generated for it");
        case Duration: return tr("From the request's last byte received to the answer's last byte sent");
        case Ttft: return tr("Time to first token of a streaming completion: from its submission to the engine "
                             "to its first token");
        default: break;
        }
    }
    return {};
}

QVariant ServedRequestModel::data(const QModelIndex &index, int role) const {
    if (!index.isValid() || index.row() >= m_rows.size()) return {};
    const ServedRequest &r = m_rows.at(index.row());
    const auto count = [](int n) { return n < 0 ? QStringLiteral("–") : QLocale().toString(n); };
    const auto ms = [](double v) { return v < 0 ? QStringLiteral("–") : QLocale().toString(v, 'f', v < 100 ? 1 : 0) + QStringLiteral(" ms"); };
    if (role == Qt::DisplayRole) {
        switch (Column(index.column())) {
        case Time: return QLocale().toString(r.time.time(), QStringLiteral("HH:mm:ss.zzz"));
        case Client: return r.client;
        case Route: return r.stream ? tr("%1 %2 (stream)").arg(r.method, r.route) : QStringLiteral("%1 %2").arg(r.method, r.route);
        case Model: return r.model.isEmpty() ? QStringLiteral("–") : r.model;
        case PromptTokens: return count(r.promptTokens);
        case CompletionTokens: return count(r.completionTokens);
        case Status: return r.status > 0 ? QString::number(r.status) : QStringLiteral("–");
        case Duration: return ms(r.durationMs);
        case Ttft: return ms(r.ttftMs);
        case ColumnCount: break;
        }
    } else if (role == Qt::TextAlignmentRole) {
        switch (Column(index.column())) {
        case PromptTokens:
        case CompletionTokens:
        case Status:
        case Duration:
        case Ttft: return int(Qt::AlignRight | Qt::AlignVCenter);
        default: break;
        }
    } else if (role == Qt::ForegroundRole && index.column() == Status && (r.status >= 400 || r.status == 0)) {
        return QBrush(QColor(0xd0, 0x3b, 0x3b)); // reads on light and dark backgrounds
    } else if (role == Qt::ToolTipRole) {
        QString tip = tr("%1 — %2 %3 from %4").arg(r.time.toString(Qt::ISODateWithMs), r.method, r.route, r.client);
        if (r.requestId) tip += QLatin1Char('\n') + tr("Engine request %1, finished: %2").arg(r.requestId).arg(r.finishReason);
        if (r.status == 0) tip += QLatin1Char('\n') + tr("No answer was written: the client went first");
        return tip;
    }
    return {};
}

} // namespace es
