// Internal: attribute/item access, methods, filters, tests and globals of the Jinja subset.
#pragma once
#include <string>
#include <unordered_map>
#include <vector>

#include "data/jinja/value.h"

namespace deltatune::jinja {

Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// Items a for loop visits (dict -> keys, string -> characters); throws for non-iterables.
List iterate(const Value& v);
bool contains(const Value& container, const Value& item);
Value apply_filter(const std::string& name, const Value& subject, std::vector<Value>& args, KwArgs& kwargs);
bool apply_test(const std::string& name, const Value& subject, std::vector<Value>& args);
bool has_filter(const std::string& name);
bool has_test(const std::string& name);
// raise_exception, namespace, range, dict, strftime_now.
void add_globals(std::unordered_map<std::string, Value>* scope);
// Python arithmetic for + - * / // % **.
Value binary_op(const std::string& op, const Value& a, const Value& b);
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);

}  // namespace deltatune::jinja
