/* server/json_schema.h — response_format json_schema: a JSON Schema compiled into an output program
 * (json_mask.h) that decoding then follows byte for byte.
 *
 * The answer is written in one canonical layout: an object's properties in the schema's order, all of
 * them (the required ones and the optional ones), as {"a": 1, "b": "x"}. Supported: "type" (one name or
 * a list of scalar names: string, number, integer, boolean, null; object; array), "properties",
 * "required" (each must be a property), "enum" and "const" (up to 64 values, any JSON), nesting up to
 * 32 levels, boolean schemas (true); arrays as [a, b] with "items" a scalar type, an enum/const or
 * anything, and "minItems"/"maxItems" followed. An object without "properties" takes any JSON object.
 * Refused with a message, rather than followed loosely: $ref, anyOf, oneOf, allOf, not, if/then/else,
 * prefixItems, contains, items that are objects with properties or arrays with items, "required"
 * naming a property not listed, an "additionalProperties" schema on an object without properties,
 * array bounds on a type union, enum values not of the schema's type, enum values over 4 KB (256 KB
 * of text in all), a root that is not an object schema (or is an enum). Reals in an enum are written
 * in their shortest form that reads back as the same double.
 * Annotations and limits JSON Schema defines (description, format, minimum, maxLength, pattern, ...)
 * are accepted and not enforced.
 */
#ifndef HEARTH_SERVER_JSON_SCHEMA_H
#define HEARTH_SERVER_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

#include "server/json_mask.h"

/* The program for schema, or NULL with msg (cap bytes, may be NULL) saying why: an unsupported or
 * malformed schema, or out of memory. Free with jprog_free. */
struct jprog *jschema_compile(json_t *schema, char *msg, size_t cap);

#endif
