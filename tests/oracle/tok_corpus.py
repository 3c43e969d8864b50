#!/usr/bin/env python3
"""tests/oracle/tok_corpus.py — writes tests/fixtures/tok/corpus.jsonl, the tokenizer test corpus.

Deterministic (fixed seed, no network). One JSON object per line: {"i": index, "cat": category,
"text": string}. Every string is a valid Python str (no lone surrogates) so that it is valid UTF-8;
invalid UTF-8 input is covered by unit tests instead. Run: python3 tests/oracle/tok_corpus.py
"""
import json, os, random

rnd = random.Random(20260507)
C = []

def add(cat, *texts):
    for t in texts:
        C.append((cat, t))

# ---- English prose -------------------------------------------------------------------------
prose = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse,",
    "I'll be there at 5, won't you? They've said we'd go; she's sure he'll come.",
    "THE END. The End. the end. tHe EnD.",
    "\"Quoted text,\" she said, 'and single quotes' too… and an ellipsis.",
    "Don't, can't, shouldn't've, y'all, o'clock, rock 'n' roll.",
    "Mr. Smith paid $1,234.56 for 3.5 lbs of coffee (approx. €1.100,00) on 2024-03-15.",
    "Hyphenated-words, en–dash, em—dash, and a minus − sign.",
    "URLs like https://example.com/path?query=1&x=y#frag and emails like john.doe+tag@example.co.uk.",
    "Transformers tokenize text into sub-word units; byte-pair encoding merges frequent pairs.",
    "In 1492, Columbus sailed the ocean blue.",
    "A sentence with    multiple   spaces and\ttabs\tinside.",
    "Trailing spaces   ",
    "   Leading spaces",
    "Unicode quotes: “double” ‘single’ «guillemets» „low“.",
    "Ünïcödé àccents: café, naïve, résumé, jalapeño, Zürich, São Paulo, Ærøskøbing.",
    "ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS #@!",
    "camelCase snake_case kebab-case PascalCase SCREAMING_SNAKE_CASE",
    "Whitespace at end\n",
    "Is it 'S or 's? IT'S, It'S, it's, IT'LL, We'VE, THEY'RE, I'M, HE'D.",
]
add("prose", *prose)
words = ("the of and to in is that it for on was with as by at this from or be are not have an they which one "
         "you had but all were when we there can more if no out so said what up its about into than them "
         "only other new some could time these two may first then do any like my now over such our man me "
         "even most made after also did many before must through back years where much your way well down "
         "should because each just those people how too little state good very make world still own see men "
         "work long get here between both life being under never day same another know while last might us "
         "great old year off come since against go came right used take three").split()
for k in range(60):
    n = rnd.randint(5, 40)
    s = " ".join(rnd.choice(words) for _ in range(n))
    s = s[0].upper() + s[1:] + rnd.choice([".", "!", "?", ",", ";", ":", "...", ""])
    if k % 5 == 0:
        s += "\n" + s.capitalize()
    add("prose", s)

# ---- code -----------------------------------------------------------------------------------
code = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "class Foo(Bar):\n    \"\"\"Docstring.\"\"\"\n\n    def __init__(self, x: int = 0) -> None:\n        self.x = x  # comment\n",
    "#include <stdio.h>\n\nint main(int argc, char **argv) {\n\tprintf(\"Hello, %s!\\n\", argv[0]);\n\treturn 0;\n}\n",
    "for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "const add = (a, b) => a + b;\nexport default { add };\n",
    "async function fetchData(url) {\n  const res = await fetch(url);\n  if (!res.ok) throw new Error(`HTTP ${res.status}`);\n  return res.json();\n}",
    "fn main() {\n    let v: Vec<i32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "impl<'a, T: Clone + Send> Iterator for Iter<'a, T> { type Item = &'a T; }",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "SELECT u.id, COUNT(*) AS n FROM users u LEFT JOIN orders o ON o.user_id = u.id WHERE u.created_at >= '2024-01-01' GROUP BY u.id HAVING n > 5;",
    "<!DOCTYPE html>\n<html>\n  <body>\n    <div class=\"x\"><p>Hi &amp; bye</p></div>\n  </body>\n</html>",
    "{\"name\": \"hearth\", \"version\": \"0.1.0\", \"tags\": [\"llm\", \"c\"], \"nested\": {\"a\": 1, \"b\": null}}",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do\n  echo \"$f\" | tr 'a-z' 'A-Z' >> out.log 2>&1\ndone\n",
    "x = [1, 2, 3]\r\ny = {k: v for k, v in zip(\"abc\", x)}\r\nprint(y)\r\n",
    "    indented with spaces\n\tindented with tab\n\t\ttwo tabs\n        eight spaces\n",
    "if (a && b || !c) { x <<= 2; y >>= 1; z ^= ~w; p->q = &r; }",
    "a==b!=c<=d>=e->f=>g::h...i**j//k%%l",
    "public static void main(String[] args) throws IOException {\n    System.out.println(\"Hello\");\n}",
    "// TODO(fixme): handle the edge case\n/* block comment */\n/** javadoc @param x the value */",
    "matrix = np.zeros((3, 3), dtype=np.float32)\nmatrix[0, :] = [1.0, -2.5e-3, 3e10]",
    "let regex = /^(?:[a-z0-9!#$%&'*+/=?^_`{|}~-]+)@(?:[a-z0-9-]+\\.)+[a-z]{2,}$/i;",
    "<?php echo htmlspecialchars($_GET['q'] ?? ''); ?>",
    "diff --git a/x.c b/x.c\n@@ -1,3 +1,4 @@\n-int x = 1;\n+int x = 2;\n+int y = 3;\n",
    "  File \"main.py\", line 42, in <module>\n    raise ValueError('bad value: %r' % x)\nValueError: bad value: None",
    "#define MAX(a, b) ((a) > (b) ? (a) : (b))\n#ifdef __cplusplus\nextern \"C\" {\n#endif",
    "\\begin{equation}\n  E = mc^2 \\quad \\sum_{i=1}^{n} x_i^2\n\\end{equation}",
    "key1=value1;key2=value2&key3[]=a&key3[]=b",
    "0x7fffffff 0b1010 0o755 1_000_000 3.14159f 1e-9 -0.0 .5 5.",
    "ｆｕｌｌｗｉｄｔｈ ｃｏｄｅ（１２３）",
    "name: CI\non:\n  push:\n    branches: [ main ]\njobs:\n  build:\n    runs-on: ubuntu-latest\n",
]
add("code", *code)

# ---- numbers and dates --------------------------------------------------------------------------
nums = ["0", "7", "42", "3333", "12345678901234567890", "3.14159265358979", "-273.15", "+1", "1,000,000",
        "1.000.000,50", "1e10", "6.022e23", "50%", "½ ¼ ¾", "٠١٢٣٤٥٦٧٨٩", "०१२३४५६७८९", "一二三四五",
        "Ⅻ ⅻ ① ② ⑳", "2024-03-15", "15/03/2024", "03/15/24", "2024-03-15T12:34:56.789Z", "12:00 PM",
        "Mon, 15 Mar 2024 12:34:56 +0000", "1 January 1970", "Q3 FY2023", "v1.2.3-beta.4+build.5",
        "+1 (555) 123-4567", "192.168.0.1", "::1", "4111 1111 1111 1111", "$9.99", "¥1000", "£3.50", "₹500",
        "10km/h", "98.6°F", "3×4=12", "2^10", "1/3≈0.333", "#1", "No. 5", "24/7", "1st 2nd 3rd 4th"]
add("numbers", *nums)
for _ in range(20):
    add("numbers", " ".join(str(rnd.randint(0, 10 ** rnd.randint(1, 12))) for _ in range(rnd.randint(1, 6))))

# ---- whitespace ---------------------------------------------------------------------------------
ws = ["", " ", "  ", "   ", "    ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", "\r", "\r\r\n",
      " \n ", "\n \n", "a\n\nb", "a \n b", "a\r\nb\rc\nd", "   \n\t  \r\n  ", "word   \n\n   word",
      "\u00a0", "a\u00a0b", "\u3000", "a\u3000b", "\u2002\u2003\u2009", "\u000b\u000c", "\u0085", "\u2028\u2029",
      "\u180e", "\u200b", "a\u200bb", " " * 17, "\t" * 9, "\n" * 12, " \t" * 8, "x" + " " * 40 + "y",
      "line1\nline2\n", "\n\nleading newlines", "trailing newlines\n\n\n", "  \n  \n  ", "\t\n\t\n",
      " ▁ ", "▁▁", "a▁b"]
add("whitespace", *ws)

# ---- scripts --------------------------------------------------------------------------------------
intl = ["你好，世界！", "我爱自然语言处理。今天天气很好。", "機械学習は面白いです。ひらがな、カタカナ、漢字。",
        "한국어 텍스트입니다. 안녕하세요!", "繁體中文與简体中文混合", "東京タワーは333メートル。",
        "مرحبا بالعالم! هذا نص عربي.", "السلام عليكم ورحمة الله", "नमस्ते दुनिया! यह हिंदी पाठ है।",
        "क्षत्रिय ज्ञान श्री", "สวัสดีครับ ภาษาไทย", "שלום עולם", "Привет, мир! Ёжик в тумане.",
        "Γειά σου Κόσμε", "Xin chào thế giới, tiếng Việt có dấu.", "Türkçe: ığüşöç İĞÜŞÖÇ",
        "Ελληνικά και English mixed 混合 テキスト", "ქართული ენა", "Հայերեն", "አማርኛ", "ᚠᛇᚻ᛫ᛒᛦᚦ",
        "𝕳𝖊𝖑𝖑𝖔 𝓦𝓸𝓻𝓵𝓭", "𝟘𝟙𝟚𝟛", "ﬁﬂ ligatures", "Å Å Å", "ℌℍ ℕ ℙ", "µ vs μ", "Ω vs Ω", "K vs K"]
add("intl", *intl)

# ---- emoji -----------------------------------------------------------------------------------------
emoji = ["😀", "😀😃😄😁", "👍🏽", "👍🏻👍🏼👍🏽👍🏾👍🏿", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🇺🇸🇯🇵🇩🇪", "1️⃣#️⃣",
         "❤️ vs ❤", "I ❤️ NY 🗽", "🦙.cpp", " this is 🦙.cpp", "🧑‍🤝‍🧑", "👁️‍🗨️", "🤷‍♂️🤷‍♀️", "Hello 👋 world 🌍!",
         "🙂🙃", "✅❌⚠️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "emoji🎉in🎊words", "😀" * 30]
add("emoji", *emoji)

# ---- combining marks, NFC vs NFD --------------------------------------------------------------------
import unicodedata
nf = ["café", "naïve", "Ångström", "résumé", "ñ", "Ệ", "한글", "가", "ﬁ", "Å", "ḱṷṓn", "q̣̇", "é", "ö",
      "Zürich", "Ω", "ǅ", "ẛ̣"]
for s in nf:
    for form in ("NFC", "NFD"):
        add("nfc_nfd", unicodedata.normalize(form, s))
    add("nfc_nfd", unicodedata.normalize("NFKC", s))
add("nfc_nfd", "e\u0301\u0301\u0301", "a\u0300\u0301\u0302\u0303\u0304", "Z\u0351\u036b\u0343\u036a\u0302\u036b",
    "\u0301 leading combining", "x\u20dd", "n\u0303o\u0308", "\u1100\u1161\u11a8", "\u0915\u094d\u0937")

# ---- unusual code points ------------------------------------------------------------------------------
odd = ["\ufffd", "a\ufffdb", "\ufeffBOM at start", "mid\ufeffBOM", "\ufdd0\ufdef", "\ufffe\uffff", "\U0001fffe",
       "\U0010ffff", "\U0010fffd", "\ue000\uf8ff", "\U000f0000", "\u200c\u200d", "a\u200db", "\u2060\u2061",
       "\u00ad soft hyphen", "\u0000", "a\u0000b", "\u0001\u0002\u0003\u001f", "\u007f", "\u0080\u0081\u009f",
       "\u001b[31mred\u001b[0m", "\u202eRTL override\u202c", "\u061c\u200e\u200f", "\U0001d11e", "\U0001f600\u0301",
       "\u034f", "\ufe0f", "\ufe0e", "\U000e0001\U000e0041", "\u2028", "ſ 'ſ 'S 'K 'k", "İstanbul ıi",
       "\u0130", "ß ẞ", "\u212a\u212b", "\u0345\u03b9", "\u1e9e", "ǰ̌", "\U0001F1E6", "\u2800\u28ff"]
add("unusual", *odd)
for _ in range(30):  # random code points from many planes (valid scalars only)
    cps = []
    for _ in range(rnd.randint(1, 12)):
        while True:
            c = rnd.choice([rnd.randint(0, 0x7f), rnd.randint(0x80, 0x7ff), rnd.randint(0x800, 0xffff),
                            rnd.randint(0x10000, 0x10ffff), rnd.randint(0x1f300, 0x1faff)])
            if not 0xd800 <= c <= 0xdfff:
                break
        cps.append(chr(c))
    add("random_cp", "".join(cps))

# ---- special tokens in context -----------------------------------------------------------------------
qwen_sp = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
           "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>",
           "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
           "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>",
           "</tool_response>", "<think>", "</think>"]
gemma_sp = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[multimodal]", "<start_of_turn>", "<end_of_turn>",
            "<start_of_image>", "<end_of_image>", "<image_soft_token>", "<unused0>", "<unused99>", "<table>",
            "</table>", "<h1>", "<code>", "</code>", "<b>", "<s>", "</s>", "<img>", "<bbox>"]
gemma4_sp = ["<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|tool_response>", "<tool_response|>", "<|\"|>"]
for tk in qwen_sp + gemma_sp + gemma4_sp:
    add("special", tk, f"Hello{tk}world", f" {tk} ", f"x\n{tk}\ny")
add("special",
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\nClassify: AMZN Mktp US*2K4LL0<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>assistant\n<think>\n\n</think>\n\nShopping<|im_end|>",
    "<bos><start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n4<end_of_turn>\n",
    "<bos><|turn>system\nYou classify transactions.<turn|>\n<|turn>user\nSQ *BLUE BOTTLE 8004<turn|>\n<|turn>model\n",
    "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|>",
    "<|im_start|><|im_start|><|im_end|><|im_end|>", "<|im_start", "im_start|>", "<|im_start|", "<|im_end|>>",
    "<<|im_end|>", "<|endoftext|><|endoftext|><|endoftext|>", "<start_of_turn><end_of_turn>",
    "<start_of_turn", "<|turn|>", "<turn|><|turn>", "<tool_call></tool_call>", "</think>\n\n",
    "<b>bold</b> <i>it</i> <table><tr><td>1</td></tr></table>", "\n<eos>\n\n<bos>\n\n\n")

# ---- long repeats --------------------------------------------------------------------------------------------
add("long", "a" * 3000, " " * 2000, "\n" * 500, "=" * 1000, "ab" * 700, "1" * 1000, "😀" * 200,
    "é" * 500, "中" * 400, "\t" * 300, "-" * 777 + "\n" + "#" * 333, ("the cat sat on the mat. " * 60),
    "x" + " " * 1500 + "x", "\u0301" * 200, "aaaa\n" * 150, "<|im_end|>" * 50)

# ---- transaction descriptions ---------------------------------------------------------------------------------
tx = ["AMZN Mktp US*2K4LL0", "SQ *BLUE BOTTLE 8004", "AMZN MKTP US*MB1234XY0 AMZN.COM/BILLWA",
      "Amazon.com*RT4Y12ZX3", "SQ *JOE'S COFFEE SF CA", "TST* SWEETGREEN 123 NEW YORK NY",
      "PAYPAL *SPOTIFY 4029357733 LU", "UBER   *TRIP HELP.UBER.COM CA", "LYFT   *RIDE SUN 10AM",
      "POS DEBIT 04/12 STARBUCKS #12345 SEATTLE WA", "CHECKCARD 0412 SHELL OIL 57442 AUSTIN TX",
      "ACH DEBIT VENMO PAYMENT 1023456789", "ZELLE TO JOHN DOE ON 03/15 REF # PP0ABC123",
      "DOORDASH*CHIPOTLE 855-431-0459 CA", "NETFLIX.COM 866-579-7172 CA", "APPLE.COM/BILL 866-712-7753 CA",
      "GOOGLE *YouTube TV g.co/helppay#", "WM SUPERCENTER #1234 DALLAS TX", "COSTCO WHSE #0481 SEATTLE WA",
      "TARGET        00012345 MINNEAPOLIS MN", "SP * ALLBIRDS.COM SAN FRANCISCO", "IC* INSTACART 888-246-7822",
      "DD *DOORDASH BURGERKIN", "PY *CITY OF OAKLAND PARKING", "CKE*CARLS JR 1234", "PAYPAL *EBAY INC",
      "INTEREST CHARGE ON PURCHASES", "ATM WITHDRAWAL 0412 7-ELEVEN #33 $60.00", "WIRE TRF IN 20240315 ACME CORP",
      "Mobile Deposit Ref# 4827361", "CARD 1234 PURCHASE 03/14 TRADER JOE S #552 QPS PORTLAND OR",
      "EXXONMOBIL    4711 HOUSTON TX 03/15", "AplPay WHOLEFDS MKT 10234 AUSTIN TX", "PRIME VIDEO*2K1AB34C0",
      "Kindle Unltd*RG6PL8ZY1", "AUDIBLE*2S40U1RT2", "MSFT * E0400KD71U", "OPENAI *CHATGPT SUBSCR",
      "HLU*Hulu 1234567890-U", "PARKMOBILE 877-727-5718 GA", "TOLL BY PLATE 0412 NYS", "RENT PMT 01APR24 UNIT 4B",
      "VZWRLSS*APOCC VISB", "COMCAST CABLE COMM 800-266-2278 PA", "SAFEWAY #1234 ;; OAKLAND,CA",
      "CASH APP*JANE D*1234", "REFUND: AMZN Mktp US*2K4LL0 -$23.99", "FOREIGN TXN FEE 3% EUR 45,20",
      "CAFÉ DE FLORE PARIS FR 12,50 EUR", "東京メトロ 定期券 ¥6,250", "REWE SAGT DANKE. 4711 KÖLN"]
add("transactions", *tx)
for _ in range(40):
    merch = rnd.choice(["AMZN Mktp US", "SQ ", "TST", "PAYPAL ", "UBER   ", "DD ", "SP ", "IC", "APPLE.COM/BILL",
                        "GOOGLE ", "WM SUPERCENTER #", "POS DEBIT "])
    code_ = "".join(rnd.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(rnd.randint(4, 10)))
    tail = rnd.choice(["", " SEATTLE WA", " 8004", " 866-712-7753 CA", " #" + str(rnd.randint(1, 99999)),
                       " 04/" + str(rnd.randint(10, 28)), " $" + str(rnd.randint(1, 999)) + "." + str(rnd.randint(10, 99))])
    add("transactions", f"{merch}*{code_}{tail}")

# ---- random mixtures ---------------------------------------------------------------------------------------------
pool = [x for _, x in C if 0 < len(x) < 60]
for _ in range(60):
    k = rnd.randint(2, 5)
    sep = rnd.choice(["", " ", "\n", "  ", "\t", "\r\n"])
    add("mixed", sep.join(rnd.choice(pool) for _ in range(k)))

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tok", "corpus.jsonl")
with open(out, "w", encoding="utf-8") as f:
    for i, (cat, t) in enumerate(C):
        f.write(json.dumps({"i": i, "cat": cat, "text": t}, ensure_ascii=True) + "\n")
print(f"{len(C)} strings -> {os.path.normpath(out)}")
