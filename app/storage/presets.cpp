// Built-in presets and the preset exchange format (documented in presets.h).
// The built-in system prompts are Chinese because ERNIE-4.5 is Chinese-first and the prefixes
// are; the English UI shows a translated description, not a translated prompt.
#include "presets.h"

#include <QCoreApplication>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

namespace es {

namespace {
const QLatin1String kFormatName("expertscope.presets");
}

QList<Preset> builtinPresets() {
    Preset technical;
    technical.builtinKey = QStringLiteral("technical");
    technical.name = QStringLiteral("技术解析模式");
    technical.prefix = QStringLiteral("【技术解析模式】");
    technical.systemPrompt = QStringLiteral(
        "你是一名资深工程师。请从工程实现的角度回答：先用一句话给出结论，再用简洁的要点列出"
        "关键技术细节、原理、权衡与限制；需要时给出代码、公式或数据。不寒暄，不重复问题，"
        "不确定的地方直接说明。");
    technical.sampling.temperature = 0.3;
    technical.sampling.topP = 0.8;
    technical.position = 0;

    Preset creative;
    creative.builtinKey = QStringLiteral("creative");
    creative.name = QStringLiteral("创意写作模式");
    creative.prefix = QStringLiteral("【创意写作模式】");
    creative.systemPrompt = QStringLiteral(
        "你是一位擅长模仿文风的创意写作者。请根据用户指定的作者、体裁或示例文本，模仿其语言"
        "风格、节奏、句式和修辞进行创作；内容保持原创，不大段照抄原文。若未指定风格，请自由"
        "发挥，语言生动、富有画面感。");
    creative.sampling.temperature = 0.9;
    creative.sampling.topP = 0.95;
    creative.position = 1;

    return {technical, creative};
}

QByteArray exportPresetsJson(const QList<Preset> &presets) {
    QJsonArray items;
    for (const Preset &p : presets) {
        QJsonObject o;
        o.insert(QLatin1String("name"), p.name);
        o.insert(QLatin1String("prefix"), p.prefix);
        o.insert(QLatin1String("system_prompt"), p.systemPrompt);
        o.insert(QLatin1String("sampling"), p.sampling.toJson());
        items.append(o);
    }
    QJsonObject root;
    root.insert(QLatin1String("format"), kFormatName);
    root.insert(QLatin1String("version"), kPresetFormatVersion);
    root.insert(QLatin1String("presets"), items);
    return QJsonDocument(root).toJson(QJsonDocument::Indented);
}

std::optional<QList<Preset>> parsePresetsJson(const QByteArray &json, QString *error) {
    auto fail = [error](const QString &why) -> std::optional<QList<Preset>> {
        *error = why;
        return std::nullopt;
    };
    QJsonParseError parseError;
    const QJsonDocument doc = QJsonDocument::fromJson(json, &parseError);
    if (parseError.error != QJsonParseError::NoError)
        return fail(QCoreApplication::translate("es::Presets", "Not a JSON file: %1 at byte %2.")
                        .arg(parseError.errorString())
                        .arg(parseError.offset));
    if (!doc.isObject())
        return fail(QCoreApplication::translate("es::Presets", "Not a preset file: expected a JSON object."));
    // Half a UTF-16 pair is no text: stored, it would come back as another character.
    if (const std::optional<LoneSurrogate> lone = findLoneSurrogate(doc, json))
        return fail(
            QCoreApplication::translate(
                "es::Presets", "Preset file: %1 holds a lone UTF-16 surrogate (\\u%2), which is not text.")
                .arg(lone->path.isEmpty() ? QStringLiteral("byte %1").arg(lone->byteOffset)
                                          : QStringLiteral("\"%1\"").arg(lone->path))
                .arg(lone->unit, 4, 16, QLatin1Char('0')));
    const QJsonObject root = doc.object();
    if (root.value(QLatin1String("format")).toString() != kFormatName)
        return fail(QCoreApplication::translate("es::Presets",
                                                "Not a preset file: \"format\" should be \"%1\".")
                        .arg(kFormatName));
    const QJsonValue version = root.value(QLatin1String("version"));
    if (!version.isDouble() || version.toDouble() != double(version.toInt()) || version.toInt() < 1)
        return fail(QCoreApplication::translate("es::Presets",
                                                "Preset file: \"version\" should be a positive integer."));
    if (version.toInt() > kPresetFormatVersion)
        return fail(QCoreApplication::translate(
                        "es::Presets",
                        "The preset file was made by a newer ExpertScope (format version %1; this "
                        "version reads up to %2).")
                        .arg(version.toInt())
                        .arg(kPresetFormatVersion));
    const QJsonValue items = root.value(QLatin1String("presets"));
    if (!items.isArray())
        return fail(QCoreApplication::translate("es::Presets", "Preset file: \"presets\" should be an array."));

    QList<Preset> out;
    const QJsonArray array = items.toArray();
    for (qsizetype i = 0; i < array.size(); ++i) {
        const QJsonObject o = array.at(i).toObject();
        const QJsonValue name = o.value(QLatin1String("name"));
        if (!array.at(i).isObject() || !name.isString() || name.toString().trimmed().isEmpty())
            return fail(QCoreApplication::translate("es::Presets",
                                                    "Preset %1: \"name\" should be a non-empty string.")
                            .arg(i + 1));
        for (const char *key : {"prefix", "system_prompt"}) {
            const QJsonValue v = o.value(QLatin1String(key));
            if (!v.isUndefined() && !v.isString())
                return fail(QCoreApplication::translate("es::Presets", "Preset %1: \"%2\" should be a string.")
                                .arg(i + 1)
                                .arg(QLatin1String(key)));
        }
        const QJsonValue sampling = o.value(QLatin1String("sampling"));
        if (!sampling.isUndefined() && !sampling.isObject())
            return fail(QCoreApplication::translate("es::Presets", "Preset %1: \"sampling\" should be an object.")
                            .arg(i + 1));
        Preset p;
        p.name = name.toString();
        p.prefix = o.value(QLatin1String("prefix")).toString();
        p.systemPrompt = o.value(QLatin1String("system_prompt")).toString();
        p.sampling = SamplingParams::fromJson(sampling.toObject());
        p.position = int(i);
        out.append(p);
    }
    return out;
}

} // namespace es
