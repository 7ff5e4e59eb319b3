<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE TS>
<TS version="2.1" language="en" sourcelanguage="en">
<context>
    <name>es::ChatStore</name>
    <message numerus="yes">
        <source>, and %n more problem(s)</source>
        <translation>
            <numerusform>, and %n more problem</numerusform>
            <numerusform>, and %n more problems</numerusform>
        </translation>
    </message>
    <message numerus="yes">
        <source>%n reply(ies) cut off when ExpertScope last closed were kept as they were.</source>
        <translation>
            <numerusform>%n reply cut off when ExpertScope last closed was kept as it was.</numerusform>
            <numerusform>%n replies cut off when ExpertScope last closed were kept as they were.</numerusform>
        </translation>
    </message>
</context>
<context>
    <name>es::ConnectServerDialog</name>
    <message numerus="yes">
        <source>%n model(s) served.</source>
        <translation>
            <numerusform>%n model served.</numerusform>
            <numerusform>%n models served.</numerusform>
        </translation>
    </message>
</context>
<context>
    <name>es::ContextFitter</name>
    <message numerus="yes">
        <source>%n earlier message(s) were left out to fit the context.</source>
        <translation>
            <numerusform>%n earlier message was left out to fit the context.</numerusform>
            <numerusform>%n earlier messages were left out to fit the context.</numerusform>
        </translation>
    </message>
</context>
<context>
    <name>es::MessageWidget</name>
    <message numerus="yes">
        <source>%n token(s)</source>
        <translation>
            <numerusform>%n token</numerusform>
            <numerusform>%n tokens</numerusform>
        </translation>
    </message>
</context>
</TS>
