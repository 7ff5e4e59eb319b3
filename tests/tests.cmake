# One line per suite (keeps merges simple).
es_add_qtest(test_tokenizer LABEL unit)
es_add_qtest(test_chat_template LABEL unit)
