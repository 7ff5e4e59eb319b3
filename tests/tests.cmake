# One line per suite (keeps merges simple).
es_add_qtest(test_safetensors LABEL unit LIBS nlohmann_json::nlohmann_json)
es_add_qtest(test_model_config LABEL unit LIBS nlohmann_json::nlohmann_json)
es_add_qtest(test_tokenizer LABEL unit)
es_add_qtest(test_chat_template LABEL unit)
es_add_qtest(test_model_reference LABEL model)
if(TARGET expertscope-cli)
  es_add_qtest(test_cli LABEL unit)
endif()
