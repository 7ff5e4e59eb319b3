// FlowLayout: lays its items out left to right and wraps to a new row when the next one would not
// fit, like words in a paragraph; the height follows the width (heightForWidth), so a row of
// buttons in a narrow pane becomes two rows instead of a scroll strip. Items keep their size hints
// (an item wider than the whole width gets a row of its own, clipped to that width).
#pragma once

#include <QLayout>
#include <QList>

namespace es {

class FlowLayout : public QLayout {
public:
    explicit FlowLayout(QWidget *parent = nullptr, int spacing = 6);
    ~FlowLayout() override;

    void addItem(QLayoutItem *item) override;
    // Inserts a widget before position index (clamped to the end).
    void insertWidget(int index, QWidget *widget);
    int count() const override { return int(m_items.size()); }
    QLayoutItem *itemAt(int index) const override { return m_items.value(index); }
    QLayoutItem *takeAt(int index) override;

    Qt::Orientations expandingDirections() const override { return {}; }
    bool hasHeightForWidth() const override { return true; }
    int heightForWidth(int width) const override { return arrange(QRect(0, 0, width, 0), false); }
    QSize minimumSize() const override;
    QSize sizeHint() const override;
    void setGeometry(const QRect &rect) override;

private:
    // Places the items in rect (when apply) and returns the height they take.
    int arrange(const QRect &rect, bool apply) const;

    QList<QLayoutItem *> m_items;
};

} // namespace es
