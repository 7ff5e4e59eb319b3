<?xml version="1.0" encoding="utf-8"?>
<!DOCTYPE TS>
<TS version="2.1" language="zh_CN" sourcelanguage="en">
<context>
    <name>Appearance</name>
    <message>
        <source>Follows the desktop&apos;s colour scheme as it changes.</source>
        <translation>跟随桌面配色方案的变化。</translation>
    </message>
    <message>
        <source>This Qt (%1) cannot ask the desktop for its colour scheme: ExpertScope reads the GTK and KDE settings when the theme is applied (at start and on OK), and uses light when they do not say dark.</source>
        <translation>此 Qt 版本（%1）无法向桌面查询配色方案：ExpertScope 在应用主题时（启动时和点击“确定”时）读取 GTK 和 KDE 的设置，若它们未指明深色，则使用浅色。</translation>
    </message>
</context>
<context>
    <name>InstanceLock</name>
    <message>
        <source>The data folder %1 is not writable (permission denied). ExpertScope keeps its conversations there: give your user write access to it, or set XDG_DATA_HOME to a writable folder.</source>
        <translation>数据文件夹 %1 不可写（权限不足）。ExpertScope 在那里保存对话：请给当前用户写入权限，或将 XDG_DATA_HOME 设为一个可写的文件夹。</translation>
    </message>
    <message>
        <source>The data folder %1 is not writable: it is on a read-only file system. ExpertScope keeps its conversations there: set XDG_DATA_HOME to a folder on a writable disk.</source>
        <translation>数据文件夹 %1 不可写：它位于只读文件系统上。ExpertScope 在那里保存对话：请将 XDG_DATA_HOME 设为可写磁盘上的文件夹。</translation>
    </message>
    <message>
        <source>The disk that holds the data folder %1 is full (%2 KiB free). Free some space and start ExpertScope again.</source>
        <translation>数据文件夹 %1 所在的磁盘已满（剩余 %2 KiB）。请释放一些空间，然后重新启动 ExpertScope。</translation>
    </message>
    <message>
        <source>The disk that holds the data folder %1 is full. Free some space and start ExpertScope again.</source>
        <translation>数据文件夹 %1 所在的磁盘已满。请释放一些空间，然后重新启动 ExpertScope。</translation>
    </message>
    <message>
        <source>Your disk quota for the data folder %1 is used up. Free some space and start ExpertScope again.</source>
        <translation>您在数据文件夹 %1 上的磁盘配额已用完。请释放一些空间，然后重新启动 ExpertScope。</translation>
    </message>
    <message>
        <source>The data folder %1 does not exist and could not be created.</source>
        <translation>数据文件夹 %1 不存在，且无法创建。</translation>
    </message>
    <message>
        <source>Could not write in the data folder %1: %2.</source>
        <translation>无法写入数据文件夹 %1：%2。</translation>
    </message>
    <message>
        <source>ExpertScope is already running (process %1 holds the lock %2).</source>
        <translation>ExpertScope 已在运行（进程 %1 持有锁文件 %2）。</translation>
    </message>
    <message>
        <source>The lock %1 was left by process %2, which is no longer running, and could not be removed. Delete it and start ExpertScope again.</source>
        <translation>锁文件 %1 由已不再运行的进程 %2 留下，且无法删除。请删除它，然后重新启动 ExpertScope。</translation>
    </message>
    <message>
        <source>Could not create the lock %1 in the data folder.</source>
        <translation>无法在数据文件夹中创建锁文件 %1。</translation>
    </message>
</context>
<context>
    <name>ProfilerDefinitions</name>
    <message>
        <source>Grey rows are dense layers (no router); grey columns on the right are shared experts, which see every token and are not part of the routed share.</source>
        <translation>灰色的行是稠密层（没有路由器）；右侧灰色的列是共享专家，它们处理每个 token，不计入路由占比。</translation>
    </message>
    <message>
        <source>Time to first token: how long the reply took to start.
TTFT: request submitted → first generated token available (ms).</source>
        <translation>首 token 时间：回复过了多久才开始出现。
TTFT：从提交请求到第一个生成的 token 可用的时间（ms）。</translation>
    </message>
    <message>
        <source>Inter-token latency: how long each next word piece of the reply took.
ITL: gap between consecutive generated tokens of one request (ms); reported as p50/p90/p99.</source>
        <translation>token 间延迟：回复中每个后续词片各用了多长时间。
ITL：同一请求中相邻两个生成 token 之间的间隔（ms），以 p50/p90/p99 显示。</translation>
    </message>
    <message>
        <source>Decode speed: how many tokens the reply produced per second once it had started.
decode tok/s: (n_out − 1) / (t_last − t_first) per request; per step: tokens decoded / step time. Over time: the tokens after the first in each quarter-second bin / the bin&apos;s length.</source>
        <translation>解码速度：回复开始后每秒生成多少个 token。
decode tok/s：每个请求为 (n_out − 1) / (t_last − t_first)；每步为：解码的 token 数 / 步耗时。随时间的曲线为：每个四分之一秒时间段内首个 token 之后的 token 数 / 时间段长度。</translation>
    </message>
    <message>
        <source>Expert load: how the tokens of each layer were shared out among its experts; a darker cell is an expert that took more of that layer&apos;s tokens.
expert load: c[l][e] = token-slots routed to expert e in layer l over a window; share = c / Σc.</source>
        <translation>专家负载：每层的 token 如何分配给该层的各个专家；单元格颜色越深，表示该专家承担了该层越多的 token。
专家负载：c[l][e] = 在一个窗口内第 l 层路由到专家 e 的 token 槽位数；占比 = c / Σc。</translation>
    </message>
    <message>
        <source>Balance: how evenly each layer spread its tokens over its experts, and how many experts it never used.
imbalance: max(c)/mean(c) per layer; balancedness = mean/max; entropy H(share)/ln E; dead experts = #{c = 0}.</source>
        <translation>均衡：每层把 token 分配到各专家上有多均匀，以及有多少专家从未被使用。
不均衡度：每层的 max(c)/mean(c)；均衡度 = mean/max；熵 H(share)/ln E；闲置专家 = #{c = 0}。</translation>
    </message>
    <message>
        <source>Fragmentation: how scattered the free memory is; KV waste: how much of the cache&apos;s blocks holds no token.
fragmentation: 1 − largest free block / total free (0 when nothing is free); KV waste = 1 − tokens stored / (blocks used × block size).</source>
        <translation>碎片率：空闲内存有多分散；KV 浪费：缓存的块中有多少空间没有存放 token。
碎片率：1 − 最大空闲块 / 空闲总量（无空闲时为 0）；KV 浪费 = 1 − 已存 token 数 / (已用块数 × 块大小)。</translation>
    </message>
    <message>
        <source>Routing difference: how differently the two messages used the experts of each layer, from 0 (the same) to the most (no expert in common).
Jensen–Shannon divergence of the two messages&apos; expert shares per layer: JS = ½ KL(P‖M) + ½ KL(Q‖M), M = ½(P + Q), natural log, so 0 (same routing) … ln 2 ≈ 0.693 (disjoint experts).</source>
        <translation>路由差异：两条消息使用各层专家的方式有多不同，从 0（相同）到最大值（没有共同的专家）。
两条消息每层专家占比的 Jensen–Shannon 散度：JS = ½ KL(P‖M) + ½ KL(Q‖M)，M = ½(P + Q)，取自然对数，因此取值从 0（路由相同）到 ln 2 ≈ 0.693（专家完全不重叠）。</translation>
    </message>
    <message>
        <source>Percentiles: p50 is the typical gap, p90 and p99 the slow ones.
Percentiles by linear interpolation between closest ranks: rank (n − 1)·q (numpy&apos;s default).</source>
        <translation>百分位数：p50 是典型的间隔，p90 和 p99 是较慢的间隔。
百分位数在相邻秩之间线性插值：秩为 (n − 1)·q（numpy 的默认方式）。</translation>
    </message>
    <message>
        <source>Where the engine spent its time while it computed this reply.
Engine time per phase over the steps that computed the reply; a step shared with other replies counts in proportion to this reply&apos;s tokens in it: attention (norms, q/k/v, RoPE, KV write, attention, output projection), MoE routed (router, routed experts), MoE shared (shared experts), dense (dense MLP layers), head and sampling (the LM head and the sampler), other (scheduling, embedding, transfers, emitting text). On the GPU the phases are timed on the device in one step in 64 and each reply&apos;s first two (every step with &quot;Time every step&quot;), and scaled to the time of all the reply&apos;s steps.</source>
        <translation>引擎在计算这条回复时把时间花在了哪里。
引擎在计算这条回复的各步中各阶段所用的时间；与其他回复共享的一步按本回复在该步中的 token 占比计入：注意力（归一化、q/k/v、RoPE、KV 写入、注意力、输出投影）、MoE 路由专家（路由器、路由专家）、MoE 共享专家（共享专家）、稠密（稠密 MLP 层）、输出头和采样（LM head 和采样器）、其他（调度、嵌入、数据传输、输出文本）。在 GPU 上，各阶段在设备上计时：每 64 步计时一步，外加每条回复的前两步（开启“为每一步计时”时每一步都计时），再按该回复所有步的时间等比例推算。</translation>
    </message>
    <message>
        <source>Memory: what the model&apos;s weights, the cached keys and values and the working buffers take, and what is left.
VRAM: weights, KV pool (the memory it has mapped now, of its capacity), workspace, allocator reserved / in use / free, device total/free. With the CPU backend: the engine&apos;s own accounting and the machine&apos;s RAM.</source>
        <translation>内存：模型权重、缓存的键和值以及工作缓冲区各占用多少，还剩多少。
显存：权重、KV 池（当前已映射的内存，及其容量）、工作区、分配器已预留 / 使用中 / 空闲、设备总量/空闲。使用 CPU 后端时：引擎自身的统计和本机内存。</translation>
    </message>
    <message>
        <source>Which blocks of the key and value cache hold a conversation now, which keep a reusable prompt and which are free.
KV block map: the paged KV cache&apos;s blocks (16 tokens each) in use, cached (free, holding a reusable prefix), free, and without memory (the top of a pool mapped on demand: mapped when requests need it, given back when they are done), one cell per block in pool order (where they lie, not only how many). A source that reports only counts (a remote server) is drawn grouped by state.</source>
        <translation>键值缓存中哪些块当前存放着对话，哪些保存着可复用的提示词，哪些是空闲的。
KV 块图：分页 KV 缓存中使用中、已缓存（空闲但保存着可复用的前缀）、空闲和没有内存（按需映射的池的顶部：请求需要时映射，用完后归还）的块（每块 16 个 token），按池中顺序每块一格（显示它们的位置，而不只是数量）。只报告数量的来源（远程服务器）按状态分组绘制。</translation>
    </message>
</context>
<context>
    <name>QObject</name>
    <message>
        <source>ExpertScope</source>
        <translation>ExpertScope</translation>
    </message>
    <message>
        <source>The conversation database could not be opened:
%1</source>
        <translation>无法打开对话数据库：
%1</translation>
    </message>
    <message>
        <source>Database recovered</source>
        <translation>数据库已恢复</translation>
    </message>
    <message>
        <source>%1B</source>
        <translation>%1B</translation>
    </message>
    <message>
        <source>%1M</source>
        <translation>%1M</translation>
    </message>
    <message>
        <source>unknown</source>
        <translation>未知</translation>
    </message>
</context>
<context>
    <name>RemoteClient</name>
    <message>
        <source>Cannot reach %1: %2</source>
        <translation>无法连接 %1：%2</translation>
    </message>
    <message>
        <source>The server refused the API key (HTTP %1)%2</source>
        <translation>服务器拒绝了 API 密钥（HTTP %1）%2</translation>
    </message>
    <message>
        <source>HTTP 404 at %1: no such route — is this an OpenAI-compatible server?</source>
        <translation>%1 返回 HTTP 404：没有这个路由——这是 OpenAI 兼容的服务器吗？</translation>
    </message>
    <message>
        <source>HTTP %1 from the server: %2</source>
        <translation>服务器返回 HTTP %1：%2</translation>
    </message>
    <message>
        <source>HTTP %1 from %2%3</source>
        <translation>%2 返回 HTTP %1%3</translation>
    </message>
    <message>
        <source>%1 lists no models</source>
        <translation>%1 没有列出任何模型</translation>
    </message>
    <message>
        <source>%1 answered, but not with an OpenAI model list — is it an OpenAI-compatible server?</source>
        <translation>%1 有应答，但不是 OpenAI 模型列表——它是 OpenAI 兼容的服务器吗？</translation>
    </message>
    <message>
        <source>Not a server address: give http://host:port</source>
        <translation>不是服务器地址：请输入 http://主机:端口</translation>
    </message>
    <message>
        <source>%1 does not serve the model &apos;%2&apos; (it serves: %3)</source>
        <translation>%1 不提供模型“%2”（它提供：%3）</translation>
    </message>
    <message>
        <source>remote: %1</source>
        <translation>远程：%1</translation>
    </message>
    <message>
        <source>The server sent a stream event that is not JSON: %1</source>
        <translation>服务器发送的流事件不是 JSON：%1</translation>
    </message>
    <message>
        <source>The server reported an error in the stream</source>
        <translation>服务器在流中报告了错误</translation>
    </message>
    <message>
        <source>The server closed the stream before the reply ended</source>
        <translation>回复结束前服务器关闭了流</translation>
    </message>
    <message>
        <source>The connection to %1 was lost: %2</source>
        <translation>与 %1 的连接中断：%2</translation>
    </message>
</context>
<context>
    <name>Startup</name>
    <message>
        <source>The last session ended unexpectedly while %1 was loading, so it was not reopened automatically. Open it from File ▸ Open model.</source>
        <translation>上次会话在加载 %1 时意外结束，因此没有自动重新打开它。请通过“文件 ▸ 打开模型”打开。</translation>
    </message>
    <message>
        <source>The last session ended unexpectedly; a reply it was writing is kept as interrupted.</source>
        <translation>上次会话意外结束；当时正在生成的回复已保留并标记为中断。</translation>
    </message>
    <message>
        <source>The data folder %1 cannot be used; the conversations are in the default folder %2 for now.</source>
        <translation>数据文件夹 %1 无法使用；对话暂时保存在默认文件夹 %2 中。</translation>
    </message>
</context>
<context>
    <name>Welcome</name>
    <message>
        <source>Welcome to ExpertScope</source>
        <translation>欢迎使用 ExpertScope</translation>
    </message>
    <message>
        <source>Welcome! ExpertScope runs language models on this computer and shows what happens inside them while they answer. This conversation was written by the app, not by the model.

**Chat pane.** Type below and press Enter to send, Esc to stop. Regenerate or edit a message to try another answer: the old one is kept, and ‹ 1/2 › switches between them. View ▸ Add a pane puts conversations side by side, and View ▸ Send to all panes asks them all the same question.

**Presets.** The preset buttons by the message box start a message in a mode: 【技术解析模式】 for technical explanations, 【创意写作模式】 for creative writing. Each preset brings its own system prompt and sampling; Manage presets… edits them and adds your own.

**Profiler.** View ▸ Profiler (Ctrl+P) opens the panels on the right: *Routing* shows which experts each layer chooses for every token, *Compare* sets two replies side by side, *Latency* shows the time to the first token and between tokens, *Memory* shows weights, KV cache and free memory. Click a message&apos;s header to see its stored profile again.

**Models.** The model loaded now is the small default model that comes with the app (answers are short and often odd: it is a demonstration). File ▸ Open model… opens an ERNIE-4.5 model folder in the Hugging Face layout, for example ERNIE-4.5-0.3B-PT or ERNIE-4.5-21B-A3B-PT downloaded from huggingface.co. The status bar shows the model, whether it runs on the GPU or the CPU, memory and speed.

Delete this conversation from the list on the left when you no longer need it; it will not come back.</source>
        <translation>欢迎！ExpertScope 在这台计算机上运行语言模型，并在模型回答时展示其内部发生的事情。这段对话由应用编写，而不是由模型生成。

**对话窗格。** 在下方输入，按 Enter 发送，按 Esc 停止。重新生成或编辑一条消息可以得到另一个回答：旧的回答会保留，用 ‹ 1/2 › 在它们之间切换。“视图 ▸ 添加窗格”把对话并排显示，“视图 ▸ 发送到所有窗格”向所有窗格提出同一个问题。

**预设。** 消息框旁的预设按钮让消息以某种模式开始：【技术解析模式】用于技术讲解，【创意写作模式】用于创意写作。每个预设带有自己的系统提示词和采样设置；“管理预设…”可以编辑它们并添加你自己的预设。

**性能分析。** “视图 ▸ 性能分析”（Ctrl+P）打开右侧的面板：*路由* 显示每一层为每个 token 选择了哪些专家，*对比* 把两条回复并排比较，*延迟* 显示首 token 时间和 token 之间的间隔，*内存* 显示权重、KV 缓存和空闲内存。点击消息的标题可以再次查看它保存的剖析数据。

**模型。** 现在加载的是应用自带的小型默认模型（回答简短，而且常常古怪：它只是用于演示）。“文件 ▸ 打开模型…”可以打开 Hugging Face 格式的 ERNIE-4.5 模型文件夹，例如从 huggingface.co 下载的 ERNIE-4.5-0.3B-PT 或 ERNIE-4.5-21B-A3B-PT。状态栏显示模型、它运行在 GPU 还是 CPU 上、内存和速度。

不再需要这段对话时，可以在左侧列表中删除它；它不会再出现。</translation>
    </message>
    <message>
        <source>What can I do here?</source>
        <translation>我在这里可以做什么？</translation>
    </message>
</context>
<context>
    <name>es::ChatPane</name>
    <message>
        <source>Sampling…</source>
        <translation>采样…</translation>
    </message>
    <message>
        <source>Temperature, top-p, seed and the other sampling settings of this conversation</source>
        <translation>本对话的温度、top-p、种子及其他采样设置</translation>
    </message>
    <message>
        <source>Sampling settings of this conversation</source>
        <translation>本对话的采样设置</translation>
    </message>
    <message>
        <source>Loading the model…</source>
        <translation>正在加载模型…</translation>
    </message>
    <message>
        <source>No model is loaded — File ▸ Open model… (Ctrl+O)</source>
        <translation>尚未加载模型 — 文件 ▸ 打开模型…（Ctrl+O）</translation>
    </message>
    <message>
        <source>Untitled</source>
        <translation>无标题</translation>
    </message>
    <message>
        <source>New conversation</source>
        <translation>新对话</translation>
    </message>
    <message>
        <source>Could not save the message: %1</source>
        <translation>无法保存消息：%1</translation>
    </message>
    <message>
        <source>Could not save the reply: %1</source>
        <translation>无法保存回复：%1</translation>
    </message>
    <message>
        <source>Could not regenerate: %1</source>
        <translation>无法重新生成：%1</translation>
    </message>
    <message>
        <source>Could not save the edit: %1</source>
        <translation>无法保存编辑：%1</translation>
    </message>
    <message>
        <source>Where this pane&apos;s replies are computed: backend and weight precision</source>
        <translation>此窗格的回复在哪里计算：后端和权重精度</translation>
    </message>
    <message>
        <source>The reply in “%1” was stopped: switching conversations stops a reply in progress. What it had written is kept.</source>
        <translation>“%1”中的回复已停止：切换对话会停止正在生成的回复。已生成的内容会保留。</translation>
    </message>
    <message>
        <source>The reply in “%1” was stopped because its conversation was deleted.</source>
        <translation>“%1”中的回复已停止，因为该对话已被删除。</translation>
    </message>
    <message>
        <source>remote</source>
        <translation>远程</translation>
    </message>
    <message>
        <source>The expert lab needs the built-in engine; a remote server does not take expert interventions.</source>
        <translation>专家实验室需要内置引擎；远程服务器不接受专家干预。</translation>
    </message>
    <message>
        <source>The expert lab needs a loaded model — File ▸ Open model… (Ctrl+O).</source>
        <translation>专家实验室需要先加载模型——文件 ▸ 打开模型…（Ctrl+O）。</translation>
    </message>
    <message>
        <source>The expert lab needs a mixture-of-experts model; %1 has no routed experts.</source>
        <translation>专家实验室需要混合专家（MoE）模型；%1 没有路由专家。</translation>
    </message>
    <message>
        <source>&lt;b&gt;Expert intervention&lt;/b&gt; — the next replies are routed under: %1. &lt;a href=&quot;edit&quot;&gt;Edit…&lt;/a&gt; · &lt;a href=&quot;clear&quot;&gt;Clear&lt;/a&gt;</source>
        <translation>&lt;b&gt;专家干预&lt;/b&gt;——接下来的回复按以下设置路由：%1。&lt;a href=&quot;edit&quot;&gt;编辑…&lt;/a&gt; · &lt;a href=&quot;clear&quot;&gt;清除&lt;/a&gt;</translation>
    </message>
    <message>
        <source>System prompt…</source>
        <translation>系统提示词…</translation>
    </message>
    <message>
        <source>This conversation&apos;s own system prompt (no preset needed)</source>
        <translation>此对话自己的系统提示词（无需预设）</translation>
    </message>
    <message>
        <source>When too long: keep system prompt and last turns</source>
        <translation>过长时：保留系统提示词和最近几轮</translation>
    </message>
    <message>
        <source>When too long: drop oldest</source>
        <translation>过长时：丢弃最早的消息</translation>
    </message>
    <message>
        <source>When too long: refuse</source>
        <translation>过长时：拒绝</translation>
    </message>
    <message>
        <source>What is sent once this conversation no longer fits the model&apos;s context: the system prompt and the latest turns; the oldest messages, system prompt included, left out first; or nothing, with the sizes named</source>
        <translation>此对话超出模型上下文时发送什么：系统提示词和最近几轮；或从最早的消息（包括系统提示词）开始省略；或什么也不发送，并说明各部分的大小</translation>
    </message>
    <message>
        <source>The prompt does not fit the model&apos;s context.</source>
        <translation>提示词超出了模型的上下文。</translation>
    </message>
    <message>
        <source>Could not continue the reply: %1</source>
        <translation>无法继续生成回复：%1</translation>
    </message>
    <message>
        <source>Delete message</source>
        <translation>删除消息</translation>
    </message>
    <message>
        <source>Delete this message and every message below it in this branch? The reply in progress is stopped first. This cannot be undone.</source>
        <translation>删除此消息以及此分支中它下方的所有消息？会先停止正在生成的回复。此操作无法撤销。</translation>
    </message>
    <message>
        <source>Delete this message and every message below it in this branch? This cannot be undone.</source>
        <translation>删除此消息以及此分支中它下方的所有消息？此操作无法撤销。</translation>
    </message>
    <message>
        <source>Delete</source>
        <translation>删除</translation>
    </message>
    <message>
        <source>The reply in progress was stopped to delete a message of its branch.</source>
        <translation>正在生成的回复已停止，以便删除其分支中的一条消息。</translation>
    </message>
    <message>
        <source>Could not delete the message: %1</source>
        <translation>无法删除消息：%1</translation>
    </message>
    <message>
        <source>System prompt of this conversation</source>
        <translation>此对话的系统提示词</translation>
    </message>
    <message>
        <source>Sent first, as the system message, with every request of this conversation. Empty: none (a preset&apos;s system prompt applies, if it has one).</source>
        <translation>作为系统消息，在此对话的每个请求中最先发送。留空：不使用（如果预设有系统提示词，则使用预设的）。</translation>
    </message>
    <message>
        <source>&lt;b&gt;System prompt&lt;/b&gt;: %1 &lt;a href=&quot;edit&quot;&gt;Edit…&lt;/a&gt; · &lt;a href=&quot;clear&quot;&gt;Clear&lt;/a&gt;</source>
        <translation>&lt;b&gt;系统提示词&lt;/b&gt;：%1 &lt;a href=&quot;edit&quot;&gt;编辑…&lt;/a&gt; · &lt;a href=&quot;clear&quot;&gt;清除&lt;/a&gt;</translation>
    </message>
    <message>
        <source>Context %1 tokens</source>
        <translation>上下文 %1 个 token</translation>
    </message>
    <message>
        <source> · KV cache %1 (%2 tokens)</source>
        <translation> · KV 缓存 %1（%2 个 token）</translation>
    </message>
    <message>
        <source>The model&apos;s context: the most tokens one prompt and its reply may hold. The KV cache holds the tokens of every reply in flight; one prompt and its reply must fit it too. Each request keeps %1 tokens free for the reply, so a prompt may have %2.</source>
        <translation>模型的上下文：一个提示词及其回复最多可包含的 token 数。KV 缓存存放所有正在生成的回复的 token；一个提示词及其回复也必须放得进去。每个请求为回复保留 %1 个 token，因此提示词最多可有 %2 个。</translation>
    </message>
    <message>
        <source>no token count for a remote server</source>
        <translation>远程服务器不提供 token 计数</translation>
    </message>
    <message>
        <source>counting tokens…</source>
        <translation>正在统计 token…</translation>
    </message>
    <message>
        <source>%1 / %2 tokens</source>
        <translation>%1 / %2 个 token</translation>
    </message>
    <message>
        <source> — too long: it will be refused</source>
        <translation> — 过长：将被拒绝</translation>
    </message>
    <message>
        <source> — too long: the oldest turns will be left out</source>
        <translation> — 过长：最早的几轮将被省略</translation>
    </message>
    <message>
        <source>The prompt that would be sent — system prompt, this branch and the text box, rendered with the chat template — in the model&apos;s tokens, against what the context leaves for it (%1 tokens are kept for the reply)</source>
        <translation>将要发送的提示词（系统提示词、此分支和输入框中的内容，按对话模板渲染）所占的模型 token 数，与上下文留给它的数量对比（为回复保留 %1 个 token）</translation>
    </message>
</context>
<context>
    <name>es::ChatStore</name>
    <message>
        <source>Could not start a transaction</source>
        <translation>无法开始事务</translation>
    </message>
    <message>
        <source>Could not commit a transaction</source>
        <translation>无法提交事务</translation>
    </message>
    <message>
        <source>The chat store was used from the wrong thread.</source>
        <translation>在错误的线程中使用了对话存储。</translation>
    </message>
    <message>
        <source>The chat database is not open.</source>
        <translation>对话数据库未打开。</translation>
    </message>
    <message>
        <source>Qt&apos;s SQLite driver (QSQLITE) is not installed.</source>
        <translation>未安装 Qt 的 SQLite 驱动（QSQLITE）。</translation>
    </message>
    <message>
        <source>the integrity check returned nothing</source>
        <translation>完整性检查没有返回任何结果</translation>
    </message>
    <message numerus="yes">
        <source>, and %n more problem(s)</source>
        <translation>
            <numerusform>，以及另外 %n 个问题</numerusform>
        </translation>
    </message>
    <message>
        <source>could not switch to WAL mode (journal_mode is %1)</source>
        <translation>无法切换到 WAL 模式（journal_mode 为 %1）</translation>
    </message>
    <message>
        <source>Could not open the chat database %1: %2</source>
        <translation>无法打开对话数据库 %1：%2</translation>
    </message>
    <message>
        <source>Could not read the chat database %1: %2</source>
        <translation>无法读取对话数据库 %1：%2</translation>
    </message>
    <message>
        <source>The chat database %1 is damaged (%2) and could not be moved aside; it was left as it is.</source>
        <translation>对话数据库 %1 已损坏（%2），且无法移到一旁；已保持原样。</translation>
    </message>
    <message>
        <source>%1 is not an intact ExpertScope database (%2); it was left as it is.</source>
        <translation>%1 不是完好的 ExpertScope 数据库（%2）；已保持原样。</translation>
    </message>
    <message>
        <source>Could not create a new chat database %1: %2</source>
        <translation>无法创建新的对话数据库 %1：%2</translation>
    </message>
    <message>
        <source>The chat database was damaged (%1). It was moved to %2 and a new, empty database was started. Conversations may be recoverable from the damaged copy with “sqlite3 &lt;copy&gt; .recover”.</source>
        <translation>对话数据库已损坏（%1）。它已被移到 %2，并新建了一个空数据库。也许可以用“sqlite3 &lt;副本&gt; .recover”从损坏的副本中恢复对话。</translation>
    </message>
    <message>
        <source>Could not set up the chat database %1: %2</source>
        <translation>无法初始化对话数据库 %1：%2</translation>
    </message>
    <message>
        <source>Could not enable foreign keys: %1</source>
        <translation>无法启用外键：%1</translation>
    </message>
    <message>
        <source>Could not set up the built-in presets: %1</source>
        <translation>无法设置内置预设：%1</translation>
    </message>
    <message>
        <source>Could not recover interrupted replies: %1</source>
        <translation>无法恢复中断的回复：%1</translation>
    </message>
    <message numerus="yes">
        <source>%n reply(ies) cut off when ExpertScope last closed were kept as they were.</source>
        <translation>
            <numerusform>ExpertScope 上次关闭时被中断的 %n 条回复已按原样保留。</numerusform>
        </translation>
    </message>
    <message>
        <source>Could not read the schema version: %1</source>
        <translation>无法读取架构版本：%1</translation>
    </message>
    <message>
        <source>The chat database %1 was written by a newer ExpertScope (schema v%2; this version reads up to v%3). It was left untouched.</source>
        <translation>对话数据库 %1 由更新版本的 ExpertScope 写入（架构 v%2；此版本最高只能读取 v%3）。已保持原样，未作改动。</translation>
    </message>
    <message>
        <source>Could not read the database schema: %1</source>
        <translation>无法读取数据库架构：%1</translation>
    </message>
    <message>
        <source>%1 is not an ExpertScope chat database (it has tables but no schema version). It was left untouched.</source>
        <translation>%1 不是 ExpertScope 对话数据库（有数据表但没有架构版本）。已保持原样，未作改动。</translation>
    </message>
    <message>
        <source>Could not back up the chat database to %1 before upgrading it: %2. It was not upgraded.</source>
        <translation>升级前无法将对话数据库备份到 %1：%2。数据库未升级。</translation>
    </message>
    <message>
        <source>foreign key check failed in table %1</source>
        <translation>表 %1 的外键检查失败</translation>
    </message>
    <message>
        <source>Upgrading the chat database to schema v%1 (%2) failed: %3. The database was left at schema v%4.</source>
        <translation>将对话数据库升级到架构 v%1（%2）失败：%3。数据库仍为架构 v%4。</translation>
    </message>
    <message>
        <source>A backup is at %1.</source>
        <translation>备份位于 %1。</translation>
    </message>
    <message>
        <source>The chat database was upgraded from schema v%1 to v%2; the previous version was saved as %3.</source>
        <translation>对话数据库已从架构 v%1 升级到 v%2；旧版本已保存为 %3。</translation>
    </message>
    <message>
        <source>(no copy: in memory)</source>
        <translation>（无副本：位于内存中）</translation>
    </message>
    <message>
        <source>Could not update a built-in preset</source>
        <translation>无法更新内置预设</translation>
    </message>
    <message>
        <source>Could not add a built-in preset</source>
        <translation>无法添加内置预设</translation>
    </message>
    <message>
        <source>Could not create a conversation</source>
        <translation>无法创建对话</translation>
    </message>
    <message>
        <source>Could not rename conversation %1</source>
        <translation>无法重命名对话 %1</translation>
    </message>
    <message>
        <source>There is no conversation %1</source>
        <translation>不存在对话 %1</translation>
    </message>
    <message>
        <source>Could not pin conversation %1</source>
        <translation>无法置顶对话 %1</translation>
    </message>
    <message>
        <source>Could not save the settings of conversation %1</source>
        <translation>无法保存对话 %1 的设置</translation>
    </message>
    <message>
        <source>Could not read conversation %1</source>
        <translation>无法读取对话 %1</translation>
    </message>
    <message>
        <source>Could not list conversations</source>
        <translation>无法列出对话</translation>
    </message>
    <message>
        <source>Could not read the messages of conversation %1</source>
        <translation>无法读取对话 %1 的消息</translation>
    </message>
    <message>
        <source>Could not delete conversation %1</source>
        <translation>无法删除对话 %1</translation>
    </message>
    <message>
        <source>Could not restore conversation %1</source>
        <translation>无法恢复对话 %1</translation>
    </message>
    <message>
        <source>Could not restore message %1</source>
        <translation>无法恢复消息 %1</translation>
    </message>
    <message>
        <source>Could not restore the metrics of message %1</source>
        <translation>无法恢复消息 %1 的指标</translation>
    </message>
    <message>
        <source>Could not restore the routing of message %1</source>
        <translation>无法恢复消息 %1 的路由</translation>
    </message>
    <message>
        <source>Could not update conversation %1</source>
        <translation>无法更新对话 %1</translation>
    </message>
    <message>
        <source>Search failed</source>
        <translation>搜索失败</translation>
    </message>
    <message>
        <source>There is no message %1</source>
        <translation>不存在消息 %1</translation>
    </message>
    <message>
        <source>Message %1 belongs to another conversation</source>
        <translation>消息 %1 属于另一个对话</translation>
    </message>
    <message>
        <source>Could not add a message to conversation %1</source>
        <translation>无法向对话 %1 添加消息</translation>
    </message>
    <message>
        <source>Could not read message %1</source>
        <translation>无法读取消息 %1</translation>
    </message>
    <message>
        <source>Could not select message %1</source>
        <translation>无法选择消息 %1</translation>
    </message>
    <message>
        <source>Message %1 is not in conversation %2</source>
        <translation>消息 %1 不在对话 %2 中</translation>
    </message>
    <message>
        <source>Could not follow the branch of message %1</source>
        <translation>无法跟随消息 %1 的分支</translation>
    </message>
    <message>
        <source>Could not read the path to message %1</source>
        <translation>无法读取到消息 %1 的路径</translation>
    </message>
    <message>
        <source>Could not read the replies to message %1</source>
        <translation>无法读取对消息 %1 的回复</translation>
    </message>
    <message>
        <source>Could not read the siblings of message %1</source>
        <translation>无法读取消息 %1 的同级消息</translation>
    </message>
    <message>
        <source>Message %1 is not a user message</source>
        <translation>消息 %1 不是用户消息</translation>
    </message>
    <message>
        <source>Message %1 is not an assistant reply</source>
        <translation>消息 %1 不是助手回复</translation>
    </message>
    <message>
        <source>Could not save the reply so far</source>
        <translation>无法保存当前已生成的回复</translation>
    </message>
    <message>
        <source>Message %1 is not a reply in progress</source>
        <translation>消息 %1 不是正在生成的回复</translation>
    </message>
    <message>
        <source>Could not save reply %1</source>
        <translation>无法保存回复 %1</translation>
    </message>
    <message>
        <source>Could not save the metrics of reply %1</source>
        <translation>无法保存回复 %1 的指标</translation>
    </message>
    <message>
        <source>Could not save the routing of reply %1</source>
        <translation>无法保存回复 %1 的路由</translation>
    </message>
    <message>
        <source>Could not look for interrupted replies</source>
        <translation>无法查找中断的回复</translation>
    </message>
    <message>
        <source>Could not mark interrupted replies</source>
        <translation>无法标记中断的回复</translation>
    </message>
    <message>
        <source>Could not read the metrics of message %1</source>
        <translation>无法读取消息 %1 的指标</translation>
    </message>
    <message>
        <source>Could not read the routing of message %1</source>
        <translation>无法读取消息 %1 的路由</translation>
    </message>
    <message>
        <source>Could not save the profile of message %1</source>
        <translation>无法保存消息 %1 的性能剖析数据</translation>
    </message>
    <message>
        <source>Could not save the routing of message %1</source>
        <translation>无法保存消息 %1 的路由</translation>
    </message>
    <message>
        <source>Could not read the profile of message %1</source>
        <translation>无法读取消息 %1 的性能剖析数据</translation>
    </message>
    <message>
        <source>The stored profile of message %1 is damaged</source>
        <translation>消息 %1 已保存的性能剖析数据已损坏</translation>
    </message>
    <message>
        <source>Could not read the presets</source>
        <translation>无法读取预设</translation>
    </message>
    <message>
        <source>There is no preset %1</source>
        <translation>不存在预设 %1</translation>
    </message>
    <message>
        <source>A preset needs a name</source>
        <translation>预设需要一个名称</translation>
    </message>
    <message>
        <source>Could not add preset %1</source>
        <translation>无法添加预设 %1</translation>
    </message>
    <message>
        <source>Could not save preset %1</source>
        <translation>无法保存预设 %1</translation>
    </message>
    <message>
        <source>Preset %1 does not exist or is built in (built-in presets cannot be changed; duplicate one instead)</source>
        <translation>预设 %1 不存在或为内置预设（内置预设不能修改；请复制一份再改）</translation>
    </message>
    <message>
        <source>Could not delete preset %1</source>
        <translation>无法删除预设 %1</translation>
    </message>
    <message>
        <source>Preset %1 does not exist or is built in (built-in presets cannot be deleted)</source>
        <translation>预设 %1 不存在或为内置预设（内置预设不能删除）</translation>
    </message>
    <message>
        <source>The new preset order must list every preset exactly once</source>
        <translation>新的预设顺序必须恰好列出每个预设一次</translation>
    </message>
    <message>
        <source>Could not reorder the presets</source>
        <translation>无法重新排列预设</translation>
    </message>
    <message>
        <source>Could not import presets</source>
        <translation>无法导入预设</translation>
    </message>
    <message>
        <source>Could not import preset %1</source>
        <translation>无法导入预设 %1</translation>
    </message>
    <message>
        <source>Could not save the benchmark run</source>
        <translation>无法保存基准测试结果</translation>
    </message>
    <message>
        <source>Could not read the benchmark runs</source>
        <translation>无法读取基准测试结果</translation>
    </message>
    <message>
        <source>Could not import the conversation &quot;%1&quot;</source>
        <translation>无法导入对话“%1”</translation>
    </message>
    <message>
        <source>Message %1 of the imported conversation names parent %2, which does not come before it</source>
        <translation>导入的对话中消息 %1 的父消息 %2 不在它之前</translation>
    </message>
    <message>
        <source>The imported conversation has two messages with id %1</source>
        <translation>导入的对话中有两条消息的 id 都是 %1</translation>
    </message>
    <message>
        <source>Could not import message %1</source>
        <translation>无法导入消息 %1</translation>
    </message>
    <message>
        <source>Could not import the metrics of message %1</source>
        <translation>无法导入消息 %1 的指标</translation>
    </message>
    <message>
        <source>Could not import the routing of message %1</source>
        <translation>无法导入消息 %1 的路由</translation>
    </message>
    <message>
        <source>The imported profile of message %1 belongs to no message</source>
        <translation>导入的消息 %1 的性能剖析不属于任何消息</translation>
    </message>
    <message>
        <source>The imported conversation&apos;s current message %1 is not one of its messages</source>
        <translation>导入的对话的当前消息 %1 不是它的消息之一</translation>
    </message>
    <message>
        <source>Could not count the messages of conversation %1</source>
        <translation>无法统计对话 %1 的消息数</translation>
    </message>
    <message>
        <source>Could not save the system prompt of conversation %1</source>
        <translation>无法保存对话 %1 的系统提示词</translation>
    </message>
    <message>
        <source>Could not save the overflow policy of conversation %1</source>
        <translation>无法保存对话 %1 的超长处理方式</translation>
    </message>
    <message>
        <source>Could not delete message %1</source>
        <translation>无法删除消息 %1</translation>
    </message>
    <message>
        <source>Message %1 is not a finished reply, so it cannot be continued</source>
        <translation>消息 %1 不是已完成的回复，因此无法继续生成</translation>
    </message>
    <message>
        <source>Could not continue reply %1</source>
        <translation>无法继续生成回复 %1</translation>
    </message>
    <message>
        <source>Message %1 is not a finished reply</source>
        <translation>消息 %1 不是已完成的回复</translation>
    </message>
</context>
<context>
    <name>es::CompareView</name>
    <message>
        <source>Selected → A</source>
        <translation>所选 → A</translation>
    </message>
    <message>
        <source>Selected → B</source>
        <translation>所选 → B</translation>
    </message>
    <message>
        <source>Swap</source>
        <translation>交换</translation>
    </message>
    <message>
        <source>Compare the message selected in the chat (click a message&apos;s header) as A</source>
        <translation>将对话中选中的消息（点击消息标题栏）作为 A 进行比较</translation>
    </message>
    <message>
        <source>Compare the message selected in the chat as B</source>
        <translation>将对话中选中的消息作为 B 进行比较</translation>
    </message>
    <message>
        <source>A: none — select a message</source>
        <translation>A：无 — 请选择一条消息</translation>
    </message>
    <message>
        <source>B: none — select a message</source>
        <translation>B：无 — 请选择一条消息</translation>
    </message>
    <message>
        <source>layer</source>
        <translation>层</translation>
    </message>
    <message>
        <source>expert</source>
        <translation>专家</translation>
    </message>
    <message>
        <source>JS divergence (nats)</source>
        <translation>JS 散度（nat）</translation>
    </message>
    <message>
        <source>ln 2 (disjoint)</source>
        <translation>ln 2（不重叠）</translation>
    </message>
    <message>
        <source>L%1</source>
        <translation>L%1</translation>
    </message>
    <message>
        <source>L%1 dense</source>
        <translation>L%1 稠密</translation>
    </message>
    <message>
        <source>S%1</source>
        <translation>S%1</translation>
    </message>
    <message>
        <source>A: none — select a message and press “Selected → A”</source>
        <translation>A：无 — 请选择一条消息，然后点击“所选 → A”</translation>
    </message>
    <message>
        <source>A: %1</source>
        <translation>A：%1</translation>
    </message>
    <message>
        <source>B: none — select a message and press “Selected → B”</source>
        <translation>B：无 — 请选择一条消息，然后点击“所选 → B”</translation>
    </message>
    <message>
        <source>B: %1</source>
        <translation>B：%1</translation>
    </message>
    <message>
        <source>L%1
dense</source>
        <translation>L%1
稠密</translation>
    </message>
    <message>
        <source>Pick two messages to compare their routing.</source>
        <translation>选择两条消息来比较它们的路由。</translation>
    </message>
    <message>
        <source>Reply tokens only</source>
        <translation>仅回复 token</translation>
    </message>
    <message>
        <source>Count only the positions the model generated, not the prompt. A mode prefix changes the prompt itself; this shows whether it also steers the experts of the answer.</source>
        <translation>只统计模型生成的位置，不含提示词。模式前缀本身就改变了提示词；这里显示它是否也引导了回答所用的专家。</translation>
    </message>
    <message>
        <source>Mean JS divergence over %1 MoE layers: %2 nats (%3% of ln 2), %4</source>
        <translation>%1 个 MoE 层的平均 JS 散度：%2 nat（ln 2 的 %3%），%4</translation>
    </message>
    <message>
        <source>reply tokens only</source>
        <translation>仅回复 token</translation>
    </message>
    <message>
        <source>prompt and reply</source>
        <translation>提示词和回复</translation>
    </message>
    <message>
        <source>B&apos;s reply against A&apos;s, word by word: yellow — only in B; struck out — only in A</source>
        <translation>逐词比较 B 的回复与 A 的回复：黄色——只在 B 中；删除线——只在 A 中</translation>
    </message>
    <message>
        <source>Pick two replies to see which words changed.</source>
        <translation>选择两条回复以查看哪些词发生了变化。</translation>
    </message>
    <message>
        <source>Words: %1 of A&apos;s %2 kept in B (%3 in B)%4</source>
        <translation>词：A 的 %2 个词中有 %1 个保留在 B 中（B 共 %3 个）%4</translation>
    </message>
    <message>
        <source>; the long middle is compared as one block</source>
        <translation>；过长的中间部分作为一个整体比较</translation>
    </message>
</context>
<context>
    <name>es::Composer</name>
    <message>
        <source>Message the model — Enter to send, Shift+Enter for a new line, Esc to stop</source>
        <translation>给模型发消息 — Enter 发送，Shift+Enter 换行，Esc 停止</translation>
    </message>
    <message>
        <source>Send</source>
        <translation>发送</translation>
    </message>
    <message>
        <source>Send (Enter)</source>
        <translation>发送（Enter）</translation>
    </message>
    <message>
        <source>Stop</source>
        <translation>停止</translation>
    </message>
    <message>
        <source>Stop generating (Esc)</source>
        <translation>停止生成（Esc）</translation>
    </message>
</context>
<context>
    <name>es::ConnectServerDialog</name>
    <message>
        <source>Connect to a server</source>
        <translation>连接到服务器</translation>
    </message>
    <message>
        <source>Base URL of an OpenAI-compatible server: expertscope-cli serve, vLLM, SGLang, FastDeploy…</source>
        <translation>OpenAI 兼容服务器的基础 URL：expertscope-cli serve、vLLM、SGLang、FastDeploy…</translation>
    </message>
    <message>
        <source>none</source>
        <translation>无</translation>
    </message>
    <message>
        <source>Remember key</source>
        <translation>记住密钥</translation>
    </message>
    <message>
        <source>Stores the key in ExpertScope&apos;s settings file, unencrypted</source>
        <translation>将密钥以未加密的形式保存在 ExpertScope 的设置文件中</translation>
    </message>
    <message>
        <source>Fetch models</source>
        <translation>获取模型列表</translation>
    </message>
    <message>
        <source>Server URL</source>
        <translation>服务器 URL</translation>
    </message>
    <message>
        <source>API key (optional)</source>
        <translation>API 密钥（可选）</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Connect</source>
        <translation>连接</translation>
    </message>
    <message numerus="yes">
        <source>%n model(s) served.</source>
        <translation>
            <numerusform>提供 %n 个模型。</numerusform>
        </translation>
    </message>
    <message>
        <source>Not a server address: give http://host:port</source>
        <translation>不是服务器地址：请输入 http://主机:端口</translation>
    </message>
    <message>
        <source>Asking %1 for its models…</source>
        <translation>正在向 %1 查询模型…</translation>
    </message>
    <message>
        <source>the server&apos;s first model</source>
        <translation>服务器的第一个模型</translation>
    </message>
</context>
<context>
    <name>es::ContextFitter</name>
    <message>
        <source>the context of %1 tokens leaves %2 for the prompt once %3 are kept for the reply</source>
        <translation>上下文共 %1 个 token，为回复保留 %3 个后，留给提示词的只有 %2 个</translation>
    </message>
    <message>
        <source>This conversation needs %1 tokens, but %2. Choose “Drop oldest” or “Keep system prompt and last turns” for this conversation, or start a new one.</source>
        <translation>此对话需要 %1 个 token，但%2。请为此对话选择“丢弃最早的消息”或“保留系统提示词和最近几轮”，或开始新对话。</translation>
    </message>
    <message>
        <source>The last message with the system prompt needs %1 tokens, but %2. Shorten the message or the system prompt.</source>
        <translation>最后一条消息连同系统提示词需要 %1 个 token，但%2。请缩短消息或系统提示词。</translation>
    </message>
    <message>
        <source>The last message needs %1 tokens, but %2. Shorten the message.</source>
        <translation>最后一条消息需要 %1 个 token，但%2。请缩短消息。</translation>
    </message>
    <message numerus="yes">
        <source>%n earlier message(s) were left out to fit the context.</source>
        <translation>
            <numerusform>为适应上下文，省略了之前的 %n 条消息。</numerusform>
        </translation>
    </message>
</context>
<context>
    <name>es::ConversationListModel</name>
    <message>
        <source>New conversation</source>
        <translation>新对话</translation>
    </message>
</context>
<context>
    <name>es::ConversationSidebar</name>
    <message>
        <source>Search conversations (Ctrl+F)</source>
        <translation>搜索对话（Ctrl+F）</translation>
    </message>
    <message>
        <source>New conversation (Ctrl+N)</source>
        <translation>新建对话（Ctrl+N）</translation>
    </message>
    <message>
        <source>Undo</source>
        <translation>撤销</translation>
    </message>
    <message>
        <source>Rename…</source>
        <translation>重命名…</translation>
    </message>
    <message>
        <source>Pin / unpin</source>
        <translation>置顶 / 取消置顶</translation>
    </message>
    <message>
        <source>Delete</source>
        <translation>删除</translation>
    </message>
    <message>
        <source>Rename conversation</source>
        <translation>重命名对话</translation>
    </message>
    <message>
        <source>Title:</source>
        <translation>标题：</translation>
    </message>
    <message>
        <source>Deleted “%1”</source>
        <translation>已删除“%1”</translation>
    </message>
</context>
<context>
    <name>es::DownloadModelDialog</name>
    <message>
        <source>Download a model</source>
        <translation>下载模型</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Kind</source>
        <translation>类型</translation>
    </message>
    <message>
        <source>Parameters</source>
        <translation>参数量</translation>
    </message>
    <message>
        <source>Download</source>
        <translation>下载量</translation>
    </message>
    <message>
        <source>BF16 here</source>
        <translation>本机 BF16</translation>
    </message>
    <message>
        <source>FP8 here</source>
        <translation>本机 FP8</translation>
    </message>
    <message>
        <source>ERNIE-4.5 checkpoints</source>
        <translation>ERNIE-4.5 检查点</translation>
    </message>
    <message>
        <source>&amp;Check</source>
        <translation>检查(&amp;C)</translation>
    </message>
    <message>
        <source>Read the repository&apos;s file list and config.json: its size, and whether ExpertScope runs it</source>
        <translation>读取仓库的文件列表和 config.json：它的大小，以及 ExpertScope 能否运行它</translation>
    </message>
    <message>
        <source>&amp;Download</source>
        <translation>下载(&amp;D)</translation>
    </message>
    <message>
        <source>C&amp;ancel download</source>
        <translation>取消下载(&amp;A)</translation>
    </message>
    <message>
        <source>Stop; the part downloaded is kept and the next download resumes from it</source>
        <translation>停止；已下载的部分会保留，下次下载从那里继续</translation>
    </message>
    <message>
        <source>Revision</source>
        <translation>版本</translation>
    </message>
    <message>
        <source>Size</source>
        <translation>大小</translation>
    </message>
    <message>
        <source>Status</source>
        <translation>状态</translation>
    </message>
    <message>
        <source>Models in the hub cache</source>
        <translation>hub 缓存中的模型</translation>
    </message>
    <message>
        <source>Recent models</source>
        <translation>最近的模型</translation>
    </message>
    <message>
        <source>ERNIE-4.5 on the Hugging Face hub</source>
        <translation>Hugging Face hub 上的 ERNIE-4.5</translation>
    </message>
    <message>
        <source>Re&amp;vision</source>
        <translation>版本(&amp;V)</translation>
    </message>
    <message>
        <source>&amp;Repository</source>
        <translation>仓库(&amp;R)</translation>
    </message>
    <message>
        <source>On this computer</source>
        <translation>本机</translation>
    </message>
    <message>
        <source>Rece&amp;nt models</source>
        <translation>最近的模型(&amp;N)</translation>
    </message>
    <message>
        <source>&amp;Load</source>
        <translation>加载(&amp;L)</translation>
    </message>
    <message>
        <source>%1 fits</source>
        <translation>%1 放得下</translation>
    </message>
    <message>
        <source>%1 does not fit</source>
        <translation>%1 放不下</translation>
    </message>
    <message>
        <source>%1: no estimate</source>
        <translation>%1：无法估算</translation>
    </message>
    <message>
        <source>%1 at %2: %3, %4 parameters (%5 active), %6 files, %7 (%8 still to download). Here: %9.</source>
        <translation>%1（%2）：%3，%4 参数（激活 %5），%6 个文件，%7（还需下载 %8）。本机：%9。</translation>
    </message>
    <message>
        <source>%1 %2 (file %3 of %4) — %5 of %6, %7/s, %8 left</source>
        <translation>%1 %2（第 %3 个文件，共 %4 个）— %5 / %6，%7/s，剩余 %8</translation>
    </message>
    <message>
        <source>Downloaded and verified: %1. Press Load to open it.</source>
        <translation>已下载并校验：%1。按“加载”打开它。</translation>
    </message>
    <message>
        <source>%1 (%2 active)</source>
        <translation>%1（激活 %2）</translation>
    </message>
    <message>
        <source>about %1</source>
        <translation>约 %1</translation>
    </message>
    <message>
        <source>The weights in BF16 as the hub stores them; the exact size comes with Check</source>
        <translation>按 hub 存储的 BF16 权重计算；确切大小可通过“检查”获得</translation>
    </message>
    <message>
        <source>needs several GPUs</source>
        <translation>需要多块 GPU</translation>
    </message>
    <message>
        <source>no estimate</source>
        <translation>无法估算</translation>
    </message>
    <message>
        <source>fits</source>
        <translation>放得下</translation>
    </message>
    <message>
        <source>does not fit</source>
        <translation>放不下</translation>
    </message>
    <message>
        <source>In the Hugging Face cache, %1 (HF_HUB_CACHE), whichever program downloaded them:</source>
        <translation>Hugging Face 缓存 %1（HF_HUB_CACHE）中的模型，无论由哪个程序下载：</translation>
    </message>
    <message>
        <source>ready</source>
        <translation>就绪</translation>
    </message>
    <message>
        <source>not loadable: %1</source>
        <translation>无法加载：%1</translation>
    </message>
    <message>
        <source>This folder no longer exists</source>
        <translation>此文件夹已不存在</translation>
    </message>
    <message>
        <source>Type a repository id (org/name) or pick a model above.</source>
        <translation>请输入仓库 ID（组织/名称），或在上方选择一个模型。</translation>
    </message>
    <message>
        <source>Checking %1…</source>
        <translation>正在检查 %1…</translation>
    </message>
    <message>
        <source>Downloading %1 from %2 into the hub cache…</source>
        <translation>正在从 %2 下载 %1 到 hub 缓存…</translation>
    </message>
    <message>
        <source>%1, base</source>
        <translation>%1，基础版</translation>
    </message>
    <message>
        <source>Pre-trained only, not post-trained for chat</source>
        <translation>仅预训练，未针对对话做后训练</translation>
    </message>
</context>
<context>
    <name>es::EngineSession</name>
    <message>
        <source>CPU: weights %1 + KV cache %2 of %3 RAM — fits</source>
        <translation>CPU：权重 %1 + KV 缓存 %2，内存共 %3 — 放得下</translation>
    </message>
    <message>
        <source>CPU: weights %1 + KV cache %2 of %3 RAM — does not fit</source>
        <translation>CPU：权重 %1 + KV 缓存 %2，内存共 %3 — 放不下</translation>
    </message>
    <message>
        <source>%1 (%2): weights %3 + KV cache %4 + workspace %5 of %6 free — fits</source>
        <translation>%1（%2）：权重 %3 + KV 缓存 %4 + 工作区 %5，空闲 %6 — 放得下</translation>
    </message>
    <message>
        <source>%1 (%2): weights %3 + KV cache %4 + workspace %5 of %6 free — does not fit</source>
        <translation>%1（%2）：权重 %3 + KV 缓存 %4 + 工作区 %5，空闲 %6 — 放不下</translation>
    </message>
    <message>
        <source>; the KV cache holds %1 tokens</source>
        <translation>；KV 缓存可容纳 %1 个 token</translation>
    </message>
    <message>
        <source>this build has no CUDA backend</source>
        <translation>此版本不含 CUDA 后端</translation>
    </message>
    <message>
        <source>the CUDA module is missing or does not load (%1)</source>
        <translation>CUDA 模块缺失或无法加载（%1）</translation>
    </message>
    <message>
        <source>no usable CUDA device (%1)</source>
        <translation>没有可用的 CUDA 设备（%1）</translation>
    </message>
    <message>
        <source>The saved backend %1 cannot run here: %2. Using Automatic.</source>
        <translation>保存的后端 %1 无法在此运行：%2。改用“自动”。</translation>
    </message>
    <message>
        <source>Expert interventions run in the built-in engine; a remote server does not take them.</source>
        <translation>专家干预在内置引擎中运行；远程服务器不接受专家干预。</translation>
    </message>
    <message>
        <source>No model is loaded.</source>
        <translation>尚未加载模型。</translation>
    </message>
    <message>
        <source>The %1 backend&apos;s router does not apply expert interventions; they run on the CPU backend.</source>
        <translation>%1 后端的路由器不执行专家干预；专家干预在 CPU 后端上运行。</translation>
    </message>
    <message>
        <source>driver for CUDA %1</source>
        <translation>支持 CUDA %1 的驱动</translation>
    </message>
    <message>
        <source>unknown</source>
        <translation>未知</translation>
    </message>
    <message>
        <source>none (the CPU backend)</source>
        <translation>无（CPU 后端）</translation>
    </message>
    <message>
        <source>the app is closing</source>
        <translation>应用正在关闭</translation>
    </message>
    <message>
        <source>%1 is loading in its place</source>
        <translation>正在改为加载 %1</translation>
    </message>
    <message>
        <source>the app connects to the server %1 instead</source>
        <translation>应用改为连接服务器 %1</translation>
    </message>
    <message>
        <source>the engine restarts with new settings</source>
        <translation>引擎以新设置重新启动</translation>
    </message>
    <message>
        <source>the model is loading again</source>
        <translation>模型正在重新加载</translation>
    </message>
</context>
<context>
    <name>es::ExpertLabDialog</name>
    <message>
        <source>Expert lab</source>
        <translation>专家实验室</translation>
    </message>
    <message>
        <source>Change how %1 routes the next replies of this conversation, then regenerate and compare the replies on the profiler&apos;s Compare page. MoE layers: %2; experts 0–%3; %4 chosen per token.</source>
        <translation>改变 %1 为本对话接下来的回复选择专家的方式，然后重新生成，并在性能分析的“对比”页比较回复。MoE 层：%2；专家 0–%3；每个 token 选择 %4 个。</translation>
    </message>
    <message>
        <source>e.g. %1:0, *:5</source>
        <translation>例如 %1:0, *:5</translation>
    </message>
    <message>
        <source>LAYER:EXPERT, comma-separated; LAYER is the checkpoint&apos;s layer index or * for every MoE layer. A disabled expert&apos;s router probability is 0 and it is never chosen.</source>
        <translation>层:专家，以逗号分隔；层是检查点中的层编号，* 表示所有 MoE 层。被禁用的专家路由概率为 0，永远不会被选中。</translation>
    </message>
    <message>
        <source>&amp;Disable experts:</source>
        <translation>禁用专家(&amp;D)：</translation>
    </message>
    <message>
        <source>e.g. *:3</source>
        <translation>例如 *:3</translation>
    </message>
    <message>
        <source>LAYER:EXPERT, comma-separated. Forced experts are chosen first; the remaining places go to the best of the others. Weights stay the router&apos;s probabilities, normalised over the chosen experts.</source>
        <translation>层:专家，以逗号分隔。强制专家最先被选中；其余名额给其他专家中得分最高的。权重仍是路由器的概率，在选中的专家之间归一化。</translation>
    </message>
    <message>
        <source>&amp;Force experts:</source>
        <translation>强制专家(&amp;F)：</translation>
    </message>
    <message>
        <source>the model&apos;s (%1)</source>
        <translation>模型默认（%1）</translation>
    </message>
    <message>
        <source>Routed experts chosen per token in every MoE layer.</source>
        <translation>每个 MoE 层中每个 token 选择的路由专家数。</translation>
    </message>
    <message>
        <source>Experts per &amp;token:</source>
        <translation>每个 token 的专家数(&amp;T)：</translation>
    </message>
    <message>
        <source>Multiplies the router&apos;s correction bias in the choice (1: the model&apos;s, 0: none). The weights never include the bias.</source>
        <translation>在选择专家时乘以路由器的校正偏置（1：模型原值，0：不用偏置）。权重从不包含偏置。</translation>
    </message>
    <message>
        <source>Correction &amp;bias × :</source>
        <translation>校正偏置(&amp;B) ×：</translation>
    </message>
    <message>
        <source>&amp;Apply</source>
        <translation>应用(&amp;A)</translation>
    </message>
    <message>
        <source>&amp;Clear</source>
        <translation>清除(&amp;C)</translation>
    </message>
    <message>
        <source>Route as the model does (no intervention)</source>
        <translation>按模型本身的方式路由（不干预）</translation>
    </message>
    <message>
        <source>No intervention: the model routes as trained.</source>
        <translation>无干预：模型按训练结果路由。</translation>
    </message>
    <message>
        <source>Next replies: %1</source>
        <translation>接下来的回复：%1</translation>
    </message>
</context>
<context>
    <name>es::ExportMenu</name>
    <message>
        <source>E&amp;xport conversation</source>
        <translation>导出对话(&amp;X)</translation>
    </message>
    <message>
        <source>As &amp;JSON (whole tree, with metrics)…</source>
        <translation>导出为 JSON（整棵消息树，含指标）(&amp;J)…</translation>
    </message>
    <message>
        <source>As &amp;Markdown (active branch)…</source>
        <translation>导出为 Markdown（当前分支）(&amp;M)…</translation>
    </message>
    <message>
        <source>No conversation is open</source>
        <translation>没有打开的对话</translation>
    </message>
    <message>
        <source>Export conversation</source>
        <translation>导出对话</translation>
    </message>
    <message>
        <source>JSON (*.json)</source>
        <translation>JSON (*.json)</translation>
    </message>
    <message>
        <source>Markdown (*.md)</source>
        <translation>Markdown (*.md)</translation>
    </message>
    <message>
        <source>&amp;Import conversation…</source>
        <translation>导入对话(&amp;I)…</translation>
    </message>
    <message>
        <source>Import conversation</source>
        <translation>导入对话</translation>
    </message>
    <message>
        <source>Export &amp;report</source>
        <translation>导出报告(&amp;R)</translation>
    </message>
    <message>
        <source>HTML</source>
        <translation>HTML</translation>
    </message>
    <message>
        <source>PDF</source>
        <translation>PDF</translation>
    </message>
    <message>
        <source>JSON</source>
        <translation>JSON</translation>
    </message>
    <message>
        <source>CSV</source>
        <translation>CSV</translation>
    </message>
    <message>
        <source>Perfetto trace</source>
        <translation>Perfetto 跟踪</translation>
    </message>
    <message>
        <source>Of the &amp;conversation</source>
        <translation>整个对话(&amp;C)</translation>
    </message>
    <message>
        <source>Of the selected &amp;message</source>
        <translation>所选消息(&amp;M)</translation>
    </message>
    <message>
        <source>Export report</source>
        <translation>导出报告</translation>
    </message>
    <message>
        <source>Exporting the conversation…</source>
        <translation>正在导出对话…</translation>
    </message>
    <message>
        <source>%1 could not be read: %2</source>
        <translation>无法读取 %1：%2</translation>
    </message>
    <message>
        <source>Gathering the conversation&apos;s measurements…</source>
        <translation>正在收集对话的测量数据…</translation>
    </message>
    <message>
        <source>This conversation has no reply to report on</source>
        <translation>此对话中没有可生成报告的回复</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>Export failed</source>
        <translation>导出失败</translation>
    </message>
    <message>
        <source>Import failed</source>
        <translation>导入失败</translation>
    </message>
    <message>
        <source>Open</source>
        <translation>打开</translation>
    </message>
    <message>
        <source>Open the saved file with the program the system uses for it</source>
        <translation>用系统为此类文件指定的程序打开保存的文件</translation>
    </message>
    <message>
        <source>Show folder</source>
        <translation>显示文件夹</translation>
    </message>
    <message>
        <source>Open the folder the file was saved in</source>
        <translation>打开文件所在的文件夹</translation>
    </message>
    <message>
        <source>Conversation</source>
        <translation>对话</translation>
    </message>
    <message>
        <source>Saved to %1</source>
        <translation>已保存到 %1</translation>
    </message>
    <message>
        <source>report</source>
        <translation>报告</translation>
    </message>
    <message>
        <source>remote server %1</source>
        <translation>远程服务器 %1</translation>
    </message>
</context>
<context>
    <name>es::LatencyView</name>
    <message>
        <source>No reply yet.</source>
        <translation>还没有回复。</translation>
    </message>
    <message>
        <source>token of the reply</source>
        <translation>回复中的 token</translation>
    </message>
    <message>
        <source>ITL (ms)</source>
        <translation>ITL（ms）</translation>
    </message>
    <message>
        <source>seconds since the first token</source>
        <translation>距首个 token 的秒数</translation>
    </message>
    <message>
        <source>tok/s</source>
        <translation>tok/s</translation>
    </message>
    <message>
        <source>reply in the conversation</source>
        <translation>对话中的回复</translation>
    </message>
    <message>
        <source>TTFT (ms)</source>
        <translation>TTFT（ms）</translation>
    </message>
    <message>
        <source>Orange: the reply shown above.</source>
        <translation>橙色：上方显示的回复。</translation>
    </message>
    <message>
        <source>ms</source>
        <translation>ms</translation>
    </message>
    <message>
        <source>Streaming:</source>
        <translation>生成中：</translation>
    </message>
    <message>
        <source>Reply:</source>
        <translation>回复：</translation>
    </message>
    <message>
        <source>Time every step</source>
        <translation>为每一步计时</translation>
    </message>
    <message>
        <source>On the GPU the engine times one step in 64 per phase (and each reply&apos;s first two): the median decode step is unchanged. On, every step is timed: each waits for the one before it and for its timeline, so decoding is slower while it is on. The CPU times every step anyway.</source>
        <translation>在 GPU 上，引擎每 64 步按阶段计时一步（外加每条回复的前两步）：解码步的中位耗时不受影响。开启后，每一步都计时：每一步都要等待前一步及其时间线完成，因此开启期间解码会变慢。CPU 本来就为每一步计时。</translation>
    </message>
    <message>
        <source>%1 %2 tokens · TTFT %3 ms · ITL p50 %4 / p90 %5 / p99 %6 ms · %7 tok/s</source>
        <translation>%1 %2 个 token · TTFT %3 ms · ITL p50 %4 / p90 %5 / p99 %6 ms · %7 tok/s</translation>
    </message>
    <message>
        <source>phases: not measured in this reply&apos;s %1 steps</source>
        <translation>各阶段：此回复的 %1 步中未测量</translation>
    </message>
    <message>
        <source>phases: not available (no engine steps were measured for this reply)</source>
        <translation>各阶段：不可用（此回复没有测量任何引擎步）</translation>
    </message>
    <message>
        <source>phases: attention %1%, MoE routed %2%, MoE shared %3%, dense %4%, head and sampling %5%, other %6% of %7 ms over %8 steps</source>
        <translation>各阶段：注意力 %1%，MoE 路由专家 %2%，MoE 共享专家 %3%，稠密 %4%，输出头和采样 %5%，其他 %6%，共 %7 ms，%8 步</translation>
    </message>
    <message>
        <source> (%1 of them timed on the device, scaled to all)</source>
        <translation>（其中 %1 步在设备上计时，按比例推算到全部）</translation>
    </message>
    <message>
        <source>Served over HTTP:</source>
        <translation>经 HTTP 提供服务：</translation>
    </message>
</context>
<context>
    <name>es::LocalServer</name>
    <message>
        <source>the app is closing</source>
        <translation>应用正在关闭</translation>
    </message>
    <message>
        <source>Enter an address to listen on: 127.0.0.1 serves this machine only, 0.0.0.0 every network.</source>
        <translation>请输入要监听的地址：127.0.0.1 只为本机提供服务，0.0.0.0 面向所有网络。</translation>
    </message>
    <message>
        <source>The address “%1” cannot be used: %2.</source>
        <translation>无法使用地址“%1”：%2。</translation>
    </message>
    <message>
        <source>Refusing to serve on %1 without an API key: anyone who can reach that address could use the model. Set an API key, listen on 127.0.0.1 (this machine only), or tick “Allow without a key”.</source>
        <translation>拒绝在没有 API 密钥的情况下于 %1 提供服务：任何能访问该地址的人都可以使用此模型。请设置 API 密钥、监听 127.0.0.1（仅本机），或勾选“允许无密钥访问”。</translation>
    </message>
    <message>
        <source>The server is already running at %1.</source>
        <translation>服务器已在 %1 运行。</translation>
    </message>
    <message>
        <source>No model is loaded: open one first (File ▸ Open model…), then start the server.</source>
        <translation>尚未加载模型：请先打开一个模型（文件 ▸ 打开模型…），再启动服务器。</translation>
    </message>
    <message>
        <source>The app is connected to a remote server: only a model loaded in the app can be served. Disconnect (Model ▸ Disconnect from the server) and open a model first.</source>
        <translation>应用当前连接着远程服务器：只能为应用中加载的模型提供服务。请先断开连接（模型 ▸ 断开与服务器的连接）并打开一个模型。</translation>
    </message>
    <message>
        <source>The model is still loading: start the server once it has loaded.</source>
        <translation>模型仍在加载：请在加载完成后再启动服务器。</translation>
    </message>
    <message>
        <source>%1 is not a port number: use 1 … 65535, or 0 for any free port.</source>
        <translation>%1 不是端口号：请使用 1 … 65535，或用 0 表示任意空闲端口。</translation>
    </message>
    <message>
        <source>The loaded model cannot be served: %1.</source>
        <translation>无法为已加载的模型提供服务：%1。</translation>
    </message>
    <message>
        <source>Port %1 on %2 is in use (another program or server listens there): choose another port, or 0 for any free one.</source>
        <translation>%2 上的端口 %1 已被占用（另一个程序或服务器正在监听）：请换一个端口，或用 0 表示任意空闲端口。</translation>
    </message>
    <message>
        <source>The server could not start: %1.</source>
        <translation>服务器无法启动：%1。</translation>
    </message>
</context>
<context>
    <name>es::MainWindow</name>
    <message>
        <source>ExpertScope</source>
        <translation>ExpertScope</translation>
    </message>
    <message>
        <source>No model</source>
        <translation>未加载模型</translation>
    </message>
    <message>
        <source>Memory the engine uses: weights + KV cache blocks in use + workspace, of the device total</source>
        <translation>引擎使用的内存：权重 + 使用中的 KV 缓存块 + 工作区，占设备总量的比例</translation>
    </message>
    <message>
        <source>Decode speed: generated tokens per second over the last half second</source>
        <translation>解码速度：最近半秒内每秒生成的 token 数</translation>
    </message>
    <message>
        <source>Profiler</source>
        <translation>性能分析</translation>
    </message>
    <message>
        <source>Loading %1…</source>
        <translation>正在加载 %1…</translation>
    </message>
    <message>
        <source>Loading the model: %1</source>
        <translation>正在加载模型：%1</translation>
    </message>
    <message>
        <source>The model could not be loaded</source>
        <translation>无法加载模型</translation>
    </message>
    <message>
        <source>&lt;p&gt;Loading &lt;b&gt;%1&lt;/b&gt; failed:&lt;/p&gt;&lt;p&gt;%2&lt;/p&gt;</source>
        <translation>&lt;p&gt;加载 &lt;b&gt;%1&lt;/b&gt; 失败：&lt;/p&gt;&lt;p&gt;%2&lt;/p&gt;</translation>
    </message>
    <message>
        <source>&amp;File</source>
        <translation>文件(&amp;F)</translation>
    </message>
    <message>
        <source>&amp;Open model…</source>
        <translation>打开模型(&amp;O)…</translation>
    </message>
    <message>
        <source>&amp;New conversation</source>
        <translation>新建对话(&amp;N)</translation>
    </message>
    <message>
        <source>&amp;Quit</source>
        <translation>退出(&amp;Q)</translation>
    </message>
    <message>
        <source>&amp;Edit</source>
        <translation>编辑(&amp;E)</translation>
    </message>
    <message>
        <source>&amp;Find conversations</source>
        <translation>查找对话(&amp;F)</translation>
    </message>
    <message>
        <source>&amp;Rename conversation…</source>
        <translation>重命名对话(&amp;R)…</translation>
    </message>
    <message>
        <source>&amp;Pin or unpin conversation</source>
        <translation>置顶或取消置顶对话(&amp;P)</translation>
    </message>
    <message>
        <source>&amp;Delete conversation</source>
        <translation>删除对话(&amp;D)</translation>
    </message>
    <message>
        <source>&amp;Undo delete</source>
        <translation>撤销删除(&amp;U)</translation>
    </message>
    <message>
        <source>&amp;View</source>
        <translation>视图(&amp;V)</translation>
    </message>
    <message>
        <source>Add a &amp;pane (compare)</source>
        <translation>添加窗格（对比）(&amp;P)</translation>
    </message>
    <message>
        <source>&amp;Close pane</source>
        <translation>关闭窗格(&amp;C)</translation>
    </message>
    <message>
        <source>&amp;Send to all panes</source>
        <translation>发送到所有窗格(&amp;S)</translation>
    </message>
    <message>
        <source>A message sent in one pane is sent in every pane, each with its own preset</source>
        <translation>在一个窗格中发送的消息会发送到每个窗格，各窗格使用各自的预设</translation>
    </message>
    <message>
        <source>&amp;Profiler</source>
        <translation>性能分析(&amp;P)</translation>
    </message>
    <message>
        <source>&amp;Presets</source>
        <translation>预设(&amp;P)</translation>
    </message>
    <message>
        <source>&amp;Model</source>
        <translation>模型(&amp;M)</translation>
    </message>
    <message>
        <source>&amp;Backend</source>
        <translation>后端(&amp;B)</translation>
    </message>
    <message>
        <source>Automatic (GPU when usable)</source>
        <translation>自动（可用时使用 GPU）</translation>
    </message>
    <message>
        <source>CUDA GPU</source>
        <translation>CUDA GPU</translation>
    </message>
    <message>
        <source>CPU</source>
        <translation>CPU</translation>
    </message>
    <message>
        <source>FP8 (E4M3 weights)</source>
        <translation>FP8（E4M3 权重）</translation>
    </message>
    <message>
        <source>&amp;Help</source>
        <translation>帮助(&amp;H)</translation>
    </message>
    <message>
        <source>&amp;About ExpertScope</source>
        <translation>关于 ExpertScope(&amp;A)</translation>
    </message>
    <message>
        <source>About ExpertScope</source>
        <translation>关于 ExpertScope</translation>
    </message>
    <message>
        <source>&lt;p&gt;&lt;b&gt;ExpertScope&lt;/b&gt; %1&lt;/p&gt;&lt;p&gt;Chat with ERNIE-4.5 models and see inside them while they answer.&lt;/p&gt;&lt;p&gt;Licensed under the GNU GPL, version 3 or later.&lt;/p&gt;</source>
        <translation>&lt;p&gt;&lt;b&gt;ExpertScope&lt;/b&gt; %1&lt;/p&gt;&lt;p&gt;与 ERNIE-4.5 模型对话，并在它回答时观察其内部。&lt;/p&gt;&lt;p&gt;依据 GNU GPL 第 3 版或更高版本授权。&lt;/p&gt;</translation>
    </message>
    <message>
        <source>&amp;Manage presets…</source>
        <translation>管理预设(&amp;M)…</translation>
    </message>
    <message>
        <source>&amp;Sampling settings of this conversation…</source>
        <translation>本对话的采样设置(&amp;S)…</translation>
    </message>
    <message>
        <source>No preset</source>
        <translation>无预设</translation>
    </message>
    <message>
        <source>Open a model folder (config.json + safetensors)</source>
        <translation>打开模型文件夹（config.json + safetensors）</translation>
    </message>
    <message>
        <source>The model may not fit</source>
        <translation>模型可能放不下</translation>
    </message>
    <message>
        <source>&lt;p&gt;%1&lt;/p&gt;&lt;p&gt;Loading may fail or make the system swap. Load anyway?&lt;/p&gt;</source>
        <translation>&lt;p&gt;%1&lt;/p&gt;&lt;p&gt;加载可能会失败，或导致系统使用交换空间。仍要加载吗？&lt;/p&gt;</translation>
    </message>
    <message>
        <source>%1 — MoE, %2 experts (top-%3), %4 layers</source>
        <translation>%1 — MoE，%2 个专家（top-%3），%4 层</translation>
    </message>
    <message>
        <source>%1 — dense, %2 layers</source>
        <translation>%1 — 稠密，%2 层</translation>
    </message>
    <message>
        <source>Memory %1 / %2</source>
        <translation>内存 %1 / %2</translation>
    </message>
    <message>
        <source>%1 · %2 · GPU not used</source>
        <translation>%1 · %2 · 未使用 GPU</translation>
    </message>
    <message>
        <source>%1 tok/s</source>
        <translation>%1 tok/s</translation>
    </message>
    <message>
        <source>idle</source>
        <translation>空闲</translation>
    </message>
    <message>
        <source>Connecting to %1…</source>
        <translation>正在连接 %1…</translation>
    </message>
    <message>
        <source>Could not connect to the server</source>
        <translation>无法连接到服务器</translation>
    </message>
    <message>
        <source>&lt;p&gt;Connecting to &lt;b&gt;%1&lt;/b&gt; failed:&lt;/p&gt;&lt;p&gt;%2&lt;/p&gt;</source>
        <translation>&lt;p&gt;连接 &lt;b&gt;%1&lt;/b&gt; 失败：&lt;/p&gt;&lt;p&gt;%2&lt;/p&gt;</translation>
    </message>
    <message>
        <source>&amp;Connect to server…</source>
        <translation>连接到服务器(&amp;C)…</translation>
    </message>
    <message>
        <source>remote: %1 · %2</source>
        <translation>远程：%1 · %2</translation>
    </message>
    <message>
        <source>%1 experts on %2 MoE layers (server metrics)</source>
        <translation>%2 个 MoE 层，每层 %1 个专家（服务器指标）</translation>
    </message>
    <message>
        <source>no expert metrics from the server</source>
        <translation>服务器未提供专家指标</translation>
    </message>
    <message>
        <source>Requests in the running batch and waiting in the queue (a remote server&apos;s own, from its /metrics: vllm:num_requests_running / _waiting)</source>
        <translation>正在批处理中运行的请求和在队列中等待的请求（远程服务器的数据来自其 /metrics：vllm:num_requests_running / _waiting）</translation>
    </message>
    <message>
        <source>%1 running · %2 waiting</source>
        <translation>%1 个运行中 · %2 个等待中</translation>
    </message>
    <message>
        <source>Add a pane at another p&amp;recision</source>
        <translation>添加另一精度的窗格(&amp;R)</translation>
    </message>
    <message>
        <source>BF16 weights</source>
        <translation>BF16 权重</translation>
    </message>
    <message>
        <source>Automatic (FP8 on the GPU, exact on the CPU)</source>
        <translation>自动（GPU 上为 FP8，CPU 上为精确值）</translation>
    </message>
    <message>
        <source>The same model loaded a second time at this precision, in a new pane; with “Send to all panes” both answer the same question</source>
        <translation>以此精度再加载一次同一个模型，放在新窗格中；配合“发送到所有窗格”，两者回答同一个问题</translation>
    </message>
    <message>
        <source>&amp;Precision</source>
        <translation>精度(&amp;P)</translation>
    </message>
    <message>
        <source>On the CPU the weights are rounded the same way and computed in fp32, so the effect of the precision on answers and routing can be compared anywhere.</source>
        <translation>在 CPU 上权重按同样的方式舍入并以 fp32 计算，因此在任何机器上都能比较精度对回答和路由的影响。</translation>
    </message>
    <message>
        <source>Load a model first: the new pane uses the same model at another precision</source>
        <translation>请先加载模型：新窗格以另一种精度使用同一个模型</translation>
    </message>
    <message>
        <source>A server&apos;s precision is the server&apos;s: open a local model to compare precisions</source>
        <translation>服务器的精度由服务器决定：请打开本地模型来比较精度</translation>
    </message>
    <message>
        <source>A second copy may not fit</source>
        <translation>第二份副本可能放不下</translation>
    </message>
    <message>
        <source>&lt;p&gt;This loads the model a second time.&lt;/p&gt;&lt;p&gt;%1&lt;/p&gt;&lt;p&gt;Load anyway?&lt;/p&gt;</source>
        <translation>&lt;p&gt;这会再加载一次模型。&lt;/p&gt;&lt;p&gt;%1&lt;/p&gt;&lt;p&gt;仍然加载吗？&lt;/p&gt;</translation>
    </message>
    <message>
        <source>&amp;KV cache</source>
        <translation>KV 缓存(&amp;K)</translation>
    </message>
    <message>
        <source>BF16 (exact keys and values)</source>
        <translation>BF16（键和值不失精度）</translation>
    </message>
    <message>
        <source>FP8 (E4M3: half the memory, on the GPU)</source>
        <translation>FP8（E4M3：内存减半，用于 GPU）</translation>
    </message>
    <message>
        <source>Keys and values stored in 16 bits, as the model computes them.</source>
        <translation>键和值以 16 位存储，与模型计算时一致。</translation>
    </message>
    <message>
        <source>Keys and values stored in 8 bits: twice the context or replies in the same GPU memory, at some cost in accuracy. The CPU keeps its fp32 cache.</source>
        <translation>键和值以 8 位存储：同样的 GPU 内存可容纳两倍的上下文或回复，精度略有损失。CPU 仍使用 fp32 缓存。</translation>
    </message>
    <message>
        <source>&amp;GPU memory</source>
        <translation>GPU 显存(&amp;G)</translation>
    </message>
    <message>
        <source>%1% (default)</source>
        <translation>%1%（默认）</translation>
    </message>
    <message>
        <source>%1%</source>
        <translation>%1%</translation>
    </message>
    <message>
        <source>The share of the GPU&apos;s memory ExpertScope may fill: the weights, the workspace and, with what they leave, the KV cache (more context and more replies at once). Memory other programs hold counts as used.</source>
        <translation>ExpertScope 可占用的 GPU 显存比例：权重、工作区，以及用剩余部分分配的 KV 缓存（更长的上下文、更多同时进行的回复）。其他程序占用的显存计为已用。</translation>
    </message>
    <message>
        <source>&amp;Download…</source>
        <translation>下载(&amp;D)…</translation>
    </message>
    <message>
        <source>&amp;Recent models</source>
        <translation>最近的模型(&amp;R)</translation>
    </message>
    <message>
        <source>(none yet)</source>
        <translation>（暂无）</translation>
    </message>
    <message>
        <source>&lt;p&gt;%1 is still loaded.&lt;/p&gt;</source>
        <translation>&lt;p&gt;%1 仍处于已加载状态。&lt;/p&gt;</translation>
    </message>
    <message>
        <source>&amp;Undo delete of “%1”</source>
        <translation>撤销删除“%1”(&amp;U)</translation>
    </message>
    <message>
        <source>D&amp;isconnect from the server</source>
        <translation>断开与服务器的连接(&amp;I)</translation>
    </message>
    <message>
        <source>%1 — not available: %2</source>
        <translation>%1 — 不可用：%2</translation>
    </message>
    <message>
        <source>The model cannot be opened</source>
        <translation>无法打开模型</translation>
    </message>
    <message>
        <source>&lt;p&gt;%1 cannot be opened:&lt;/p&gt;&lt;p&gt;%2&lt;/p&gt;</source>
        <translation>&lt;p&gt;无法打开 %1：&lt;/p&gt;&lt;p&gt;%2&lt;/p&gt;</translation>
    </message>
    <message>
        <source>&amp;Expert lab…</source>
        <translation>专家实验室(&amp;E)…</translation>
    </message>
    <message>
        <source>Pre&amp;ferences…</source>
        <translation>首选项(&amp;F)…</translation>
    </message>
    <message>
        <source>No room for another pane: close one (Ctrl+W), hide the profiler or widen the window</source>
        <translation>没有空间再添加窗格：请关闭一个窗格（Ctrl+W）、隐藏性能分析器或加宽窗口</translation>
    </message>
    <message>
        <source>The app serves its model over HTTP (Model ▸ Server…)</source>
        <translation>应用正在通过 HTTP 提供其模型（模型 ▸ 服务器…）</translation>
    </message>
    <message>
        <source>&lt;a href=&quot;server&quot;&gt;Serving at %1&lt;/a&gt;</source>
        <translation>&lt;a href=&quot;server&quot;&gt;正在 %1 提供服务&lt;/a&gt;</translation>
    </message>
    <message>
        <source>The server stopped: %1</source>
        <translation>服务器已停止：%1</translation>
    </message>
    <message>
        <source>&amp;Server…</source>
        <translation>服务器(&amp;S)…</translation>
    </message>
    <message>
        <source>Serve the loaded model to OpenAI-compatible clients over HTTP</source>
        <translation>通过 HTTP 向兼容 OpenAI 的客户端提供已加载的模型</translation>
    </message>
</context>
<context>
    <name>es::MemoryUsageView</name>
    <message>
        <source>No model loaded.</source>
        <translation>未加载模型。</translation>
    </message>
    <message>
        <source>seconds</source>
        <translation>秒</translation>
    </message>
    <message>
        <source>weights</source>
        <translation>权重</translation>
    </message>
    <message>
        <source>KV cache</source>
        <translation>KV 缓存</translation>
    </message>
    <message>
        <source>workspace</source>
        <translation>工作区</translation>
    </message>
    <message>
        <source>free</source>
        <translation>空闲</translation>
    </message>
    <message>
        <source>Stack free memory on top</source>
        <translation>将空闲内存堆叠在最上方</translation>
    </message>
    <message>
        <source>ratio</source>
        <translation>比率</translation>
    </message>
    <message>
        <source>fragmentation</source>
        <translation>碎片率</translation>
    </message>
    <message>
        <source>KV waste</source>
        <translation>KV 浪费</translation>
    </message>
    <message>
        <source>KV in use</source>
        <translation>使用中的 KV</translation>
    </message>
    <message>
        <source>Free device memory as the top band. With the CPU backend it is the machine&apos;s available RAM, which would flatten everything else, so it starts unticked there.</source>
        <translation>将设备空闲内存显示为最上方的一层。使用 CPU 后端时它是本机的可用内存，会把其他各项压得几乎看不见，因此默认不勾选。</translation>
    </message>
    <message>
        <source> · on the device: %1; in use beyond them %2 (the CUDA context, other processes)</source>
        <translation> · 设备上：%1；除此之外还占用 %2（CUDA 上下文、其他进程）</translation>
    </message>
    <message>
        <source>other (libraries, context, other processes)</source>
        <translation>其他（库、上下文、其他进程）</translation>
    </message>
    <message>
        <source>Memory figures are not available from this source (a remote server reports none).</source>
        <translation>此来源不提供内存数据（远程服务器不报告内存）。</translation>
    </message>
    <message>
        <source>not available</source>
        <translation>不可用</translation>
    </message>
    <message>
        <source> · KV pool: %1</source>
        <translation> · KV 池：%1</translation>
    </message>
    <message>
        <source>KV block map: &lt;span style=&apos;color:#dc5028&apos;&gt;■&lt;/span&gt; in use &lt;span style=&apos;color:#4678c8&apos;&gt;■&lt;/span&gt; cached (free, reusable prefix) &lt;span style=&apos;color:#b4b4b4&apos;&gt;■&lt;/span&gt; free &lt;span style=&apos;color:#dcdcdc&apos;&gt;□&lt;/span&gt; no memory (mapped when needed)</source>
        <translation>KV 块图：&lt;span style=&apos;color:#dc5028&apos;&gt;■&lt;/span&gt; 使用中 &lt;span style=&apos;color:#4678c8&apos;&gt;■&lt;/span&gt; 已缓存（空闲，可复用的前缀） &lt;span style=&apos;color:#b4b4b4&apos;&gt;■&lt;/span&gt; 空闲 &lt;span style=&apos;color:#dcdcdc&apos;&gt;□&lt;/span&gt; 没有内存（需要时映射）</translation>
    </message>
    <message>
        <source>In use %1 (weights %2, KV %3 of %4 mapped, of a %17 pool, workspace %5) · device total %6, free %7 · allocator reserved %8, in use %9, largest free %10 · fragmentation %11 · KV waste %12 · KV blocks %13 used / %14 cached / %15 free (%16 per cell)</source>
        <translation>使用中 %1（权重 %2，KV %3 / 已映射 %4，池容量 %17，工作区 %5）· 设备总量 %6，空闲 %7 · 分配器已预留 %8，使用中 %9，最大空闲块 %10 · 碎片率 %11 · KV 浪费 %12 · KV 块：已用 %13 / 已缓存 %14 / 空闲 %15（每格 %16）</translation>
    </message>
</context>
<context>
    <name>es::MessageWidget</name>
    <message>
        <source>Click to show this message&apos;s profile in the profiler</source>
        <translation>点击以在性能分析器中显示此消息的性能数据</translation>
    </message>
    <message>
        <source>Previous version</source>
        <translation>上一版本</translation>
    </message>
    <message>
        <source>Next version</source>
        <translation>下一版本</translation>
    </message>
    <message>
        <source>Copy</source>
        <translation>复制</translation>
    </message>
    <message>
        <source>Copy this message as Markdown</source>
        <translation>以 Markdown 格式复制此消息</translation>
    </message>
    <message>
        <source>Edit</source>
        <translation>编辑</translation>
    </message>
    <message>
        <source>Edit this message and send it again (the original stays as a branch)</source>
        <translation>编辑此消息并重新发送（原消息保留为一个分支）</translation>
    </message>
    <message>
        <source>Regenerate</source>
        <translation>重新生成</translation>
    </message>
    <message>
        <source>Generate another reply (the current one stays as a branch)</source>
        <translation>生成另一个回复（当前回复保留为一个分支）</translation>
    </message>
    <message>
        <source>Save &amp;&amp; send</source>
        <translation>保存并发送</translation>
    </message>
    <message>
        <source>Cancel</source>
        <translation>取消</translation>
    </message>
    <message>
        <source>generating…</source>
        <translation>生成中…</translation>
    </message>
    <message>
        <source>interrupted (the app closed mid-reply)</source>
        <translation>已中断（应用在回复中途关闭）</translation>
    </message>
    <message>
        <source>failed: %1</source>
        <translation>失败：%1</translation>
    </message>
    <message>
        <source>stopped</source>
        <translation>已停止</translation>
    </message>
    <message>
        <source>cut at the token limit</source>
        <translation>已达到 token 上限而截断</translation>
    </message>
    <message>
        <source>You</source>
        <translation>你</translation>
    </message>
    <message>
        <source>Assistant</source>
        <translation>助手</translation>
    </message>
    <message>
        <source>System</source>
        <translation>系统</translation>
    </message>
    <message>
        <source>Copied</source>
        <translation>已复制</translation>
    </message>
    <message>
        <source>Code copied</source>
        <translation>代码已复制</translation>
    </message>
    <message>
        <source>Copy code</source>
        <translation>复制代码</translation>
    </message>
    <message>
        <source>Copy code · %1</source>
        <translation>复制代码 · %1</translation>
    </message>
    <message>
        <source>expert intervention: %1</source>
        <translation>专家干预：%1</translation>
    </message>
    <message>
        <source>Continue</source>
        <translation>继续</translation>
    </message>
    <message>
        <source>This reply stopped at its token limit: generate more of it</source>
        <translation>此回复在达到 token 上限时停止：继续生成</translation>
    </message>
    <message>
        <source>More actions</source>
        <translation>更多操作</translation>
    </message>
    <message>
        <source>Delete message…</source>
        <translation>删除消息…</translation>
    </message>
    <message>
        <source>Delete this message and every message below it in this branch</source>
        <translation>删除此消息以及此分支中它下方的所有消息</translation>
    </message>
    <message>
        <source>Sent %1</source>
        <translation>发送于 %1</translation>
    </message>
    <message>
        <source>Started %1</source>
        <translation>开始于 %1</translation>
    </message>
    <message>
        <source>Finished %1 (%2 s)</source>
        <translation>完成于 %1（%2 秒）</translation>
    </message>
    <message>
        <source>%1 tok/s</source>
        <translation>%1 tok/s</translation>
    </message>
    <message numerus="yes">
        <source>%n token(s)</source>
        <translation>
            <numerusform>%n 个 token</numerusform>
        </translation>
    </message>
    <message>
        <source>prompt %1</source>
        <translation>提示词 %1</translation>
    </message>
    <message>
        <source>TTFT %1 ms</source>
        <translation>TTFT %1 ms</translation>
    </message>
    <message>
        <source>stop: %1</source>
        <translation>结束原因：%1</translation>
    </message>
</context>
<context>
    <name>es::ModelHub</name>
    <message>
        <source>Listing the files</source>
        <translation>正在列出文件</translation>
    </message>
    <message>
        <source>Checking the free space</source>
        <translation>正在检查可用空间</translation>
    </message>
    <message>
        <source>Downloading</source>
        <translation>正在下载</translation>
    </message>
    <message>
        <source>Verifying</source>
        <translation>正在校验</translation>
    </message>
    <message>
        <source>Finishing</source>
        <translation>正在完成</translation>
    </message>
</context>
<context>
    <name>es::PreferencesDialog</name>
    <message>
        <source>Preferences</source>
        <translation>首选项</translation>
    </message>
    <message>
        <source>&amp;Engine</source>
        <translation>引擎(&amp;E)</translation>
    </message>
    <message>
        <source>Used by every reply unless its preset or conversation sets the field. An unset field is the model&apos;s own default (from its generation_config.json).</source>
        <translation>用于每条回复，除非其预设或对话设置了该项。未设置的项使用模型自己的默认值（来自其 generation_config.json）。</translation>
    </message>
    <message>
        <source>Default &amp;sampling</source>
        <translation>默认采样(&amp;S)</translation>
    </message>
    <message>
        <source>&amp;Interface</source>
        <translation>界面(&amp;I)</translation>
    </message>
    <message>
        <source>&amp;Data</source>
        <translation>数据(&amp;D)</translation>
    </message>
    <message>
        <source>Automatic (GPU when usable)</source>
        <translation>自动（可用时使用 GPU）</translation>
    </message>
    <message>
        <source>CUDA GPU</source>
        <translation>CUDA GPU</translation>
    </message>
    <message>
        <source>CPU</source>
        <translation>CPU</translation>
    </message>
    <message>
        <source>%1 — not available: %2</source>
        <translation>%1 — 不可用：%2</translation>
    </message>
    <message>
        <source>Automatic (FP8 on the GPU, exact on the CPU)</source>
        <translation>自动（GPU 上为 FP8，CPU 上为精确值）</translation>
    </message>
    <message>
        <source>FP8 (E4M3 weights)</source>
        <translation>FP8（E4M3 权重）</translation>
    </message>
    <message>
        <source>BF16 weights</source>
        <translation>BF16 权重</translation>
    </message>
    <message>
        <source>BF16 (exact keys and values)</source>
        <translation>BF16（键和值不失精度）</translation>
    </message>
    <message>
        <source>FP8 (E4M3: half the memory, on the GPU)</source>
        <translation>FP8（E4M3：内存减半，用于 GPU）</translation>
    </message>
    <message>
        <source> %</source>
        <translation> %</translation>
    </message>
    <message>
        <source>The share of the GPU&apos;s memory ExpertScope may fill: the weights, the workspace and, with what they leave, the KV cache. Memory other programs hold counts as used.</source>
        <translation>ExpertScope 可占用的 GPU 显存比例：权重、工作区，以及用剩余部分分配的 KV 缓存。其他程序占用的显存计为已用。</translation>
    </message>
    <message>
        <source>All cores (%1)</source>
        <translation>所有核心（%1）</translation>
    </message>
    <message>
        <source>Threads the CPU backend computes with</source>
        <translation>CPU 后端计算所用的线程数</translation>
    </message>
    <message>
        <source>&amp;Backend:</source>
        <translation>后端(&amp;B)：</translation>
    </message>
    <message>
        <source>&amp;Precision:</source>
        <translation>精度(&amp;P)：</translation>
    </message>
    <message>
        <source>&amp;KV cache:</source>
        <translation>KV 缓存(&amp;K)：</translation>
    </message>
    <message>
        <source>&amp;GPU memory share:</source>
        <translation>GPU 显存比例(&amp;G)：</translation>
    </message>
    <message>
        <source>CPU &amp;threads:</source>
        <translation>CPU 线程数(&amp;T)：</translation>
    </message>
    <message>
        <source>A change here reloads the model (replies in progress stop). If it does not load with the new settings, the previous ones come back and the model loads again.</source>
        <translation>更改此处会重新加载模型（正在生成的回复会停止）。如果用新设置无法加载，会恢复之前的设置并重新加载模型。</translation>
    </message>
    <message>
        <source>The system&apos;s language</source>
        <translation>系统语言</translation>
    </message>
    <message>
        <source>Follow the system</source>
        <translation>跟随系统</translation>
    </message>
    <message>
        <source>Light</source>
        <translation>浅色</translation>
    </message>
    <message>
        <source>Dark</source>
        <translation>深色</translation>
    </message>
    <message>
        <source>System (%1 pt)</source>
        <translation>系统（%1 pt）</translation>
    </message>
    <message>
        <source> pt</source>
        <translation> pt</translation>
    </message>
    <message>
        <source>The size of the messages and of the message box</source>
        <translation>消息和消息框的字号</translation>
    </message>
    <message>
        <source>&amp;Language:</source>
        <translation>语言(&amp;L)：</translation>
    </message>
    <message>
        <source>&amp;Theme:</source>
        <translation>主题(&amp;T)：</translation>
    </message>
    <message>
        <source>Chat &amp;font size:</source>
        <translation>对话字号(&amp;F)：</translation>
    </message>
    <message>
        <source>&amp;Browse…</source>
        <translation>浏览(&amp;B)…</translation>
    </message>
    <message>
        <source>Data folder</source>
        <translation>数据文件夹</translation>
    </message>
    <message>
        <source>Data &amp;folder:</source>
        <translation>数据文件夹(&amp;F)：</translation>
    </message>
    <message>
        <source>The new language is used from the next start of ExpertScope.</source>
        <translation>新语言将在 ExpertScope 下次启动时生效。</translation>
    </message>
    <message>
        <source>Where the conversation database (expertscope.sqlite) lives; empty: the default folder shown. ExpertScope uses a new folder from its next start and does not move the database: copy it over to keep your conversations.</source>
        <translation>对话数据库（expertscope.sqlite）所在的位置；留空：使用所示的默认文件夹。ExpertScope 从下次启动时开始使用新文件夹，且不会移动数据库：若要保留对话，请把它复制过去。</translation>
    </message>
    <message>
        <source>Changed: used from the next start.</source>
        <translation>已更改：下次启动时生效。</translation>
    </message>
    <message>
        <source>Data folder: “%1” is not a full path.</source>
        <translation>数据文件夹：“%1”不是完整路径。</translation>
    </message>
    <message>
        <source>Data folder: “%1” is a file, not a folder.</source>
        <translation>数据文件夹：“%1”是文件，不是文件夹。</translation>
    </message>
    <message>
        <source>Data folder: “%1” is not writable (%2).</source>
        <translation>数据文件夹：“%1”不可写（%2）。</translation>
    </message>
    <message>
        <source>Data folder: “%1” does not exist and cannot be created in “%2”.</source>
        <translation>数据文件夹：“%1”不存在，且无法在“%2”中创建。</translation>
    </message>
    <message>
        <source>Backend: %1 cannot run here: %2.</source>
        <translation>后端：%1 无法在此运行：%2。</translation>
    </message>
    <message>
        <source>Backend and precision: %1 cannot be loaded with them: %2</source>
        <translation>后端和精度：无法用它们加载 %1：%2</translation>
    </message>
    <message>
        <source>Preferences not saved</source>
        <translation>首选项未保存</translation>
    </message>
    <message>
        <source>The model did not load with the new engine settings (%1); the previous settings are back and it loads again.</source>
        <translation>模型无法用新的引擎设置加载（%1）；已恢复之前的设置，正在重新加载模型。</translation>
    </message>
</context>
<context>
    <name>es::PresetBar</name>
    <message>
        <source>Manage presets…</source>
        <translation>管理预设…</translation>
    </message>
    <message>
        <source>Create, edit, reorder, import and export presets</source>
        <translation>创建、编辑、排序、导入和导出预设</translation>
    </message>
    <message>
        <source>Preset. Applies the prefix %1</source>
        <translation>预设。应用前缀 %1</translation>
    </message>
    <message>
        <source>Prefix:</source>
        <translation>前缀：</translation>
    </message>
    <message>
        <source>(none)</source>
        <translation>（无）</translation>
    </message>
    <message>
        <source>System prompt:</source>
        <translation>系统提示词：</translation>
    </message>
    <message>
        <source>Sampling:</source>
        <translation>采样：</translation>
    </message>
    <message>
        <source>Shortcut:</source>
        <translation>快捷键：</translation>
    </message>
    <message>
        <source>Built-in preset.</source>
        <translation>内置预设。</translation>
    </message>
</context>
<context>
    <name>es::PresetEditorDialog</name>
    <message>
        <source>Presets[*]</source>
        <translation>预设[*]</translation>
    </message>
    <message>
        <source>&amp;Presets (in preset-bar order):</source>
        <translation>预设（按预设栏中的顺序）(&amp;P)：</translation>
    </message>
    <message>
        <source>&amp;Add</source>
        <translation>添加(&amp;A)</translation>
    </message>
    <message>
        <source>Add a new preset (%1)</source>
        <translation>添加新预设（%1）</translation>
    </message>
    <message>
        <source>D&amp;uplicate</source>
        <translation>复制(&amp;U)</translation>
    </message>
    <message>
        <source>Copy the selected preset as a new preset of yours (built-ins too)</source>
        <translation>将所选预设复制为你自己的新预设（内置预设也可以）</translation>
    </message>
    <message>
        <source>&amp;Delete</source>
        <translation>删除(&amp;D)</translation>
    </message>
    <message>
        <source>Delete the selected preset (built-in presets cannot be deleted)</source>
        <translation>删除所选预设（内置预设不能删除）</translation>
    </message>
    <message>
        <source>Move up in the preset bar (Alt+Up)</source>
        <translation>在预设栏中上移（Alt+Up）</translation>
    </message>
    <message>
        <source>Move up</source>
        <translation>上移</translation>
    </message>
    <message>
        <source>Move down in the preset bar (Alt+Down)</source>
        <translation>在预设栏中下移（Alt+Down）</translation>
    </message>
    <message>
        <source>Move down</source>
        <translation>下移</translation>
    </message>
    <message>
        <source>&amp;Import…</source>
        <translation>导入(&amp;I)…</translation>
    </message>
    <message>
        <source>Add the presets of an ExpertScope preset file (JSON)</source>
        <translation>添加 ExpertScope 预设文件（JSON）中的预设</translation>
    </message>
    <message>
        <source>E&amp;xport…</source>
        <translation>导出(&amp;X)…</translation>
    </message>
    <message>
        <source>Save every preset, in this order, to a JSON file</source>
        <translation>按当前顺序将所有预设保存到 JSON 文件</translation>
    </message>
    <message>
        <source>Built-in preset: read-only. Use Duplicate to make an editable copy.</source>
        <translation>内置预设：只读。使用“复制”可得到一份可编辑的副本。</translation>
    </message>
    <message>
        <source>The chip&apos;s label in the preset bar</source>
        <translation>该预设在预设栏中显示的标签</translation>
    </message>
    <message>
        <source>e.g. 【技术解析模式】</source>
        <translation>例如 【技术解析模式】</translation>
    </message>
    <message>
        <source>Put at the start of your message when the preset is applied</source>
        <translation>应用预设时放在消息开头</translation>
    </message>
    <message>
        <source>Optional: instructions the model reads before the conversation</source>
        <translation>可选：模型在对话开始前读取的指令</translation>
    </message>
    <message>
        <source>The system prompt; empty for none</source>
        <translation>系统提示词；留空表示不使用</translation>
    </message>
    <message>
        <source>&amp;Name:</source>
        <translation>名称(&amp;N)：</translation>
    </message>
    <message>
        <source>P&amp;refix:</source>
        <translation>前缀(&amp;R)：</translation>
    </message>
    <message>
        <source>S&amp;ystem prompt:</source>
        <translation>系统提示词(&amp;Y)：</translation>
    </message>
    <message>
        <source>Sampling (unchecked: the model&apos;s default)</source>
        <translation>采样（未勾选：使用模型默认值）</translation>
    </message>
    <message>
        <source>Re&amp;vert</source>
        <translation>还原(&amp;V)</translation>
    </message>
    <message>
        <source>Discard the unsaved changes to this preset</source>
        <translation>放弃对此预设的未保存修改</translation>
    </message>
    <message>
        <source>&amp;Save</source>
        <translation>保存(&amp;S)</translation>
    </message>
    <message>
        <source>Save the changes to this preset (%1)</source>
        <translation>保存对此预设的修改（%1）</translation>
    </message>
    <message>
        <source>Built-in presets are read-only: duplicate this one to change it</source>
        <translation>内置预设是只读的：请复制一份再修改</translation>
    </message>
    <message>
        <source>New preset</source>
        <translation>新预设</translation>
    </message>
    <message>
        <source>Add preset</source>
        <translation>添加预设</translation>
    </message>
    <message>
        <source>Could not add a preset.</source>
        <translation>无法添加预设。</translation>
    </message>
    <message>
        <source>Added “%1”.</source>
        <translation>已添加“%1”。</translation>
    </message>
    <message>
        <source>%1 (copy)</source>
        <translation>%1（副本）</translation>
    </message>
    <message>
        <source>Duplicate preset</source>
        <translation>复制预设</translation>
    </message>
    <message>
        <source>Could not duplicate “%1”.</source>
        <translation>无法复制“%1”。</translation>
    </message>
    <message>
        <source>The copy was added at the end: %1</source>
        <translation>副本已添加到末尾：%1</translation>
    </message>
    <message>
        <source>Duplicated “%1”.</source>
        <translation>已复制“%1”。</translation>
    </message>
    <message>
        <source>Delete preset</source>
        <translation>删除预设</translation>
    </message>
    <message>
        <source>Could not delete “%1”.</source>
        <translation>无法删除“%1”。</translation>
    </message>
    <message>
        <source>Deleted “%1”.</source>
        <translation>已删除“%1”。</translation>
    </message>
    <message>
        <source>Move preset</source>
        <translation>移动预设</translation>
    </message>
    <message>
        <source>Could not change the order.</source>
        <translation>无法更改顺序。</translation>
    </message>
    <message>
        <source>Save preset</source>
        <translation>保存预设</translation>
    </message>
    <message>
        <source>A preset needs a name.</source>
        <translation>预设需要一个名称。</translation>
    </message>
    <message>
        <source>Could not save “%1”.</source>
        <translation>无法保存“%1”。</translation>
    </message>
    <message>
        <source>Saved “%1”.</source>
        <translation>已保存“%1”。</translation>
    </message>
    <message>
        <source>Import presets</source>
        <translation>导入预设</translation>
    </message>
    <message>
        <source>Could not read “%1”: %2</source>
        <translation>无法读取“%1”：%2</translation>
    </message>
    <message>
        <source>“%1” is too large to be a preset file (%2 MB).</source>
        <translation>“%1”太大，不可能是预设文件（%2 MB）。</translation>
    </message>
    <message>
        <source>Could not import presets from “%1”: %2</source>
        <translation>无法从“%1”导入预设：%2</translation>
    </message>
    <message>
        <source>“%1” holds no presets.</source>
        <translation>“%1”中没有预设。</translation>
    </message>
    <message>
        <source>Nothing imported from “%1”: all its presets (%2) are already here.</source>
        <translation>没有从“%1”导入任何内容：其中的预设（%2 个）已全部存在。</translation>
    </message>
    <message>
        <source>Presets imported from “%1”: %2 added, %3 already here.</source>
        <translation>已从“%1”导入预设：新增 %2 个，%3 个已存在。</translation>
    </message>
    <message>
        <source>Export presets</source>
        <translation>导出预设</translation>
    </message>
    <message>
        <source>Could not write “%1”: %2</source>
        <translation>无法写入“%1”：%2</translation>
    </message>
    <message>
        <source>Exported all presets (%1) to “%2”.</source>
        <translation>已将全部预设（%1 个）导出到“%2”。</translation>
    </message>
    <message>
        <source>ExpertScope presets (*.json);;All files (*)</source>
        <translation>ExpertScope 预设 (*.json);;所有文件 (*)</translation>
    </message>
    <message>
        <source>ExpertScope presets (*.json)</source>
        <translation>ExpertScope 预设 (*.json)</translation>
    </message>
    <message>
        <source>Delete the preset “%1”? This cannot be undone.</source>
        <translation>删除预设“%1”？此操作无法撤销。</translation>
    </message>
    <message>
        <source>Delete</source>
        <translation>删除</translation>
    </message>
    <message>
        <source>Unsaved changes</source>
        <translation>未保存的修改</translation>
    </message>
    <message>
        <source>The preset “%1” has unsaved changes.</source>
        <translation>预设“%1”有未保存的修改。</translation>
    </message>
    <message>
        <source>Save them before leaving it?</source>
        <translation>离开前要保存吗？</translation>
    </message>
</context>
<context>
    <name>es::PresetListModel</name>
    <message>
        <source>(unnamed)</source>
        <translation>（未命名）</translation>
    </message>
    <message>
        <source>Built-in preset (read-only): duplicate it to make your own version.</source>
        <translation>内置预设（只读）：复制它即可得到你自己的版本。</translation>
    </message>
    <message>
        <source>Your preset.</source>
        <translation>你的预设。</translation>
    </message>
    <message>
        <source>Prefix: %1</source>
        <translation>前缀：%1</translation>
    </message>
    <message>
        <source>Sampling: %1</source>
        <translation>采样：%1</translation>
    </message>
    <message>
        <source>Built-in, read-only</source>
        <translation>内置，只读</translation>
    </message>
</context>
<context>
    <name>es::Presets</name>
    <message>
        <source>Not a JSON file: %1 at byte %2.</source>
        <translation>不是 JSON 文件：%1，位于第 %2 字节。</translation>
    </message>
    <message>
        <source>Not a preset file: expected a JSON object.</source>
        <translation>不是预设文件：应为 JSON 对象。</translation>
    </message>
    <message>
        <source>Preset file: %1 holds a lone UTF-16 surrogate (\u%2), which is not text.</source>
        <translation>预设文件：%1 含有孤立的 UTF-16 代理项（\u%2），它不是文本。</translation>
    </message>
    <message>
        <source>Not a preset file: &quot;format&quot; should be &quot;%1&quot;.</source>
        <translation>不是预设文件：&quot;format&quot; 应为 &quot;%1&quot;。</translation>
    </message>
    <message>
        <source>Preset file: &quot;version&quot; should be a positive integer.</source>
        <translation>预设文件：&quot;version&quot; 应为正整数。</translation>
    </message>
    <message>
        <source>The preset file was made by a newer ExpertScope (format version %1; this version reads up to %2).</source>
        <translation>该预设文件由更新版本的 ExpertScope 创建（格式版本 %1；此版本最高只能读取 %2）。</translation>
    </message>
    <message>
        <source>Preset file: &quot;presets&quot; should be an array.</source>
        <translation>预设文件：&quot;presets&quot; 应为数组。</translation>
    </message>
    <message>
        <source>Preset %1: &quot;name&quot; should be a non-empty string.</source>
        <translation>预设 %1：&quot;name&quot; 应为非空字符串。</translation>
    </message>
    <message>
        <source>Preset %1: &quot;%2&quot; should be a string.</source>
        <translation>预设 %1：&quot;%2&quot; 应为字符串。</translation>
    </message>
    <message>
        <source>Preset %1: &quot;sampling&quot; should be an object.</source>
        <translation>预设 %1：&quot;sampling&quot; 应为对象。</translation>
    </message>
</context>
<context>
    <name>es::ProfilerPanel</name>
    <message>
        <source>Routing</source>
        <translation>路由</translation>
    </message>
    <message>
        <source>Compare</source>
        <translation>对比</translation>
    </message>
    <message>
        <source>Latency</source>
        <translation>延迟</translation>
    </message>
    <message>
        <source>Memory</source>
        <translation>内存</translation>
    </message>
    <message>
        <source>Which experts each layer routes tokens to</source>
        <translation>每层把 token 路由到哪些专家</translation>
    </message>
    <message>
        <source>Two messages&apos; routing side by side, with the per-layer Jensen–Shannon divergence</source>
        <translation>两条消息的路由并排对比，以及每层的 Jensen–Shannon 散度</translation>
    </message>
    <message>
        <source>TTFT, inter-token latency, tok/s and engine time per phase</source>
        <translation>TTFT、token 间延迟、tok/s 以及引擎各阶段耗时</translation>
    </message>
    <message>
        <source>Weights, KV cache, workspace and free memory; fragmentation; the KV block map</source>
        <translation>权重、KV 缓存、工作区和空闲内存；碎片率；KV 块图</translation>
    </message>
    <message>
        <source>Live: the engine&apos;s last %1 steps, %2 token-slots</source>
        <translation>实时：引擎最近 %1 步，%2 个 token 槽位</translation>
    </message>
    <message>
        <source>Message #%1</source>
        <translation>消息 #%1</translation>
    </message>
    <message>
        <source>The reply streaming now</source>
        <translation>正在生成的回复</translation>
    </message>
    <message>
        <source>The last reply</source>
        <translation>最近一条回复</translation>
    </message>
    <message>
        <source>No message selected (click a message&apos;s header)</source>
        <translation>未选择消息（点击消息的标题栏）</translation>
    </message>
    <message>
        <source>%1: %2 token-slots</source>
        <translation>%1：%2 个 token 槽位</translation>
    </message>
    <message>
        <source>Conversation: %1 finished replies on the active branch, %2 token-slots</source>
        <translation>对话：当前分支上 %1 条已完成的回复，%2 个 token 槽位</translation>
    </message>
    <message>
        <source>No conversation</source>
        <translation>无对话</translation>
    </message>
    <message>
        <source>#%1 “%2”</source>
        <translation>#%1“%2”</translation>
    </message>
    <message>
        <source>The server %1 does not expose expert metrics (expertscope:expert_tokens_total), so its routing cannot be shown. ExpertScope&apos;s own server does; vLLM and SGLang do not.</source>
        <translation>服务器 %1 未公开专家指标（expertscope:expert_tokens_total），因此无法显示其路由。ExpertScope 自己的服务器提供该指标；vLLM 和 SGLang 不提供。</translation>
    </message>
    <message>
        <source>Live: the server&apos;s last %1 s (%2 steps), %3 token-slots from all its clients</source>
        <translation>实时：服务器最近 %1 秒（%2 步），来自其所有客户端的 %3 个 token 槽位</translation>
    </message>
    <message>
        <source>%1: no routing recorded — a remote server&apos;s replies carry none (see Live for the server&apos;s expert metrics)</source>
        <translation>%1：未记录路由——远程服务器的回复不携带路由信息（服务器的专家指标请见“实时”）</translation>
    </message>
    <message>
        <source>experts: %1</source>
        <translation>专家：%1</translation>
    </message>
    <message>
        <source>A remote server does not report its steps&apos; launches.</source>
        <translation>远程服务器不报告其各步的内核启动。</translation>
    </message>
    <message>
        <source>The CPU times each step per phase as a whole; the step timeline is recorded on the GPU.</source>
        <translation>CPU 按阶段为每一步整体计时；步时间线只在 GPU 上记录。</translation>
    </message>
    <message>
        <source>No step of this reply was timed on the GPU.</source>
        <translation>此回复没有任何一步在 GPU 上计时。</translation>
    </message>
    <message>
        <source>the tokens of %1 replies</source>
        <translation>%1 条回复的 token</translation>
    </message>
    <message>
        <source>no routing recorded</source>
        <translation>未记录路由</translation>
    </message>
    <message>
        <source>the shown reply&apos;s prompt and reply</source>
        <translation>所显示回复的提示词和回复</translation>
    </message>
    <message>
        <source>%1 tokens: %2</source>
        <translation>%1 个 token：%2</translation>
    </message>
    <message>
        <source>The last request served over HTTP</source>
        <translation>最近一次经 HTTP 处理的请求</translation>
    </message>
</context>
<context>
    <name>es::RemoteClient</name>
    <message>
        <source>expert interventions run in the built-in engine; a remote server does not take them (clear them in Model ▸ Expert lab, or disconnect)</source>
        <translation>专家干预在内置引擎中运行；远程服务器不接受专家干预（请在“模型 ▸ 专家实验室”中清除，或断开连接）</translation>
    </message>
    <message>
        <source>continuing a reply needs the built-in engine; the OpenAI API of a remote server cannot carry on an assistant message (disconnect to continue it here)</source>
        <translation>继续生成回复需要内置引擎；远程服务器的 OpenAI API 无法接着一条助手消息继续生成（断开连接后可在这里继续）</translation>
    </message>
</context>
<context>
    <name>es::RoutingView</name>
    <message>
        <source>Live (recent engine steps)</source>
        <translation>实时（最近的引擎步）</translation>
    </message>
    <message>
        <source>Selected message</source>
        <translation>所选消息</translation>
    </message>
    <message>
        <source>Whole conversation</source>
        <translation>整个对话</translation>
    </message>
    <message>
        <source>What the heatmap counts: the engine&apos;s sliding window of recent steps, the selected (or latest) reply, or every finished reply of the current conversation&apos;s active branch</source>
        <translation>热力图统计的内容：引擎最近若干步的滑动窗口、所选（或最新的）回复，或当前对话活动分支上的所有已完成回复</translation>
    </message>
    <message>
        <source>expert</source>
        <translation>专家</translation>
    </message>
    <message>
        <source>layer</source>
        <translation>层</translation>
    </message>
    <message>
        <source>token share</source>
        <translation>token 占比</translation>
    </message>
    <message>
        <source>shared</source>
        <translation>共享</translation>
    </message>
    <message>
        <source>dead</source>
        <translation>闲置</translation>
    </message>
    <message>
        <source>token position (prompt | reply)</source>
        <translation>token 位置（提示词 | 回复）</translation>
    </message>
    <message>
        <source>MoE layer</source>
        <translation>MoE 层</translation>
    </message>
    <message>
        <source>Hover a token to see its experts.</source>
        <translation>将鼠标悬停在 token 上以查看其专家。</translation>
    </message>
    <message>
        <source>L%1 dense</source>
        <translation>L%1 稠密</translation>
    </message>
    <message>
        <source>L%1</source>
        <translation>L%1</translation>
    </message>
    <message>
        <source>S%1</source>
        <translation>S%1</translation>
    </message>
    <message>
        <source>dense</source>
        <translation>稠密</translation>
    </message>
    <message>
        <source>Prompt token %1</source>
        <translation>提示词 token %1</translation>
    </message>
    <message>
        <source>Reply token %1 (position %2)</source>
        <translation>回复 token %1（位置 %2）</translation>
    </message>
    <message>
        <source>e%1 %2</source>
        <translation>e%1 %2</translation>
    </message>
    <message>
        <source>L%1: %2</source>
        <translation>L%1：%2</translation>
    </message>
    <message>
        <source>prefix cache</source>
        <translation>前缀缓存</translation>
    </message>
    <message>
        <source>max/mean</source>
        <translation>最大/平均</translation>
    </message>
    <message>
        <source>H/ln E</source>
        <translation>归一化熵 H/ln E</translation>
    </message>
    <message>
        <source>Disable expert %1 of layer %2 in this conversation…</source>
        <translation>在本对话中禁用第 %2 层的专家 %1…</translation>
    </message>
    <message>
        <source>Force expert %1 of layer %2 in this conversation…</source>
        <translation>在本对话中强制使用第 %2 层的专家 %1…</translation>
    </message>
    <message>
        <source>Imbalance: how much busier the busiest expert is than the average one; 1 is perfectly even.
max(c)/mean(c)</source>
        <translation>不均衡度：最忙的专家比平均水平忙多少；1 表示完全均匀。
max(c)/mean(c)</translation>
    </message>
    <message>
        <source>Spread: how evenly the tokens are spread over all experts; 1 is perfectly even, near 0 is one expert taking nearly everything.
normalized entropy H(share)/ln E</source>
        <translation>分散度：token 在所有专家上分布得有多均匀；1 表示完全均匀，接近 0 表示几乎所有 token 都由一个专家承担。
归一化熵 H(share)/ln E</translation>
    </message>
    <message>
        <source>Dead experts: how many experts of the layer received no token at all.
#{c = 0}</source>
        <translation>闲置专家：该层中一个 token 都没有收到的专家数。
#{c = 0}</translation>
    </message>
    <message>
        <source>Each cell is the expert that weighed most for that token in that layer; its colour stands for the expert.
Hover a token for its top-k experts and weights per layer, and the router&apos;s margin.</source>
        <translation>每个单元格是该 token 在该层权重最大的专家；颜色代表专家。
将鼠标悬停在 token 上可查看它在每层的 top-k 专家及权重，以及路由器的裕度。</translation>
    </message>
    <message>
        <source>Chosen together in</source>
        <translation>同时选中的专家对：</translation>
    </message>
    <message>
        <source>The MoE layer whose expert pairs are listed</source>
        <translation>所列专家对所在的 MoE 层</translation>
    </message>
    <message>
        <source>experts</source>
        <translation>专家</translation>
    </message>
    <message>
        <source>tokens together</source>
        <translation>共同 token 数</translation>
    </message>
    <message>
        <source>lift</source>
        <translation>提升度</translation>
    </message>
    <message>
        <source>Two experts the router chose for the same token</source>
        <translation>路由器为同一 token 选中的两个专家</translation>
    </message>
    <message>
        <source>How many tokens were sent to both experts in this layer, and their share of the tokens</source>
        <translation>该层中同时发送给这两个专家的 token 数，以及它们占全部 token 的比例</translation>
    </message>
    <message>
        <source>How much more often the two were chosen together than if the router picked them independently; above 1 they go together.
P(a and b) / (P(a) · P(b))</source>
        <translation>两者被同时选中的频率是路由器独立选择时的多少倍；大于 1 表示它们倾向于一起被选中。
P(a 且 b) / (P(a) · P(b))</translation>
    </message>
    <message>
        <source>Which experts this layer&apos;s router picks together for the same token, most often first</source>
        <translation>该层路由器为同一 token 共同选中的专家，按次数从多到少排列</translation>
    </message>
    <message>
        <source>layer %1</source>
        <translation>第 %1 层</translation>
    </message>
    <message>
        <source>e%1 + e%2</source>
        <translation>e%1 + e%2</translation>
    </message>
    <message>
        <source>%1 (%2%)</source>
        <translation>%1（%2%）</translation>
    </message>
    <message>
        <source>margin %1</source>
        <translation>裕度 %1</translation>
    </message>
    <message>
        <source>margin: how narrowly the last chosen expert beat the next one (router score, probability + bias); near 0 the token almost went elsewhere</source>
        <translation>裕度：最后一个被选中的专家领先下一个专家的幅度（路由器得分，即概率 + 偏置）；接近 0 表示该 token 差点被分给别的专家</translation>
    </message>
    <message>
        <source>margin: not recorded for this reply (it was stored before margins were recorded)</source>
        <translation>裕度：此回复未记录（它保存于开始记录裕度之前）</translation>
    </message>
</context>
<context>
    <name>es::SamplingControls</name>
    <message>
        <source>temperature %1</source>
        <translation>温度 %1</translation>
    </message>
    <message>
        <source>top-p %1</source>
        <translation>top-p %1</translation>
    </message>
    <message>
        <source>top-k %1</source>
        <translation>top-k %1</translation>
    </message>
    <message>
        <source>min-p %1</source>
        <translation>min-p %1</translation>
    </message>
    <message>
        <source>repetition penalty %1</source>
        <translation>重复惩罚 %1</translation>
    </message>
    <message>
        <source>presence penalty %1</source>
        <translation>存在惩罚 %1</translation>
    </message>
    <message>
        <source>frequency penalty %1</source>
        <translation>频率惩罚 %1</translation>
    </message>
    <message>
        <source>max tokens %1</source>
        <translation>最大 token 数 %1</translation>
    </message>
    <message>
        <source>seed %1</source>
        <translation>种子 %1</translation>
    </message>
    <message>
        <source>stop strings: %1</source>
        <translation>停止字符串：%1</translation>
    </message>
    <message>
        <source>model defaults</source>
        <translation>模型默认值</translation>
    </message>
    <message>
        <source>, </source>
        <translation>，</translation>
    </message>
    <message>
        <source>&amp;Temperature</source>
        <translation>温度(&amp;T)</translation>
    </message>
    <message>
        <source>How random the reply is: the logits are divided by the temperature before sampling. Lower is more focused and repeatable, higher more varied; 0 always picks the most likely token (greedy).</source>
        <translation>回复的随机程度：采样前将 logits 除以温度。越低越集中、越可重复，越高越多样；0 表示总是选择可能性最大的 token（贪心）。</translation>
    </message>
    <message>
        <source>greedy</source>
        <translation>贪心</translation>
    </message>
    <message>
        <source>T&amp;op-p</source>
        <translation>Top-p(&amp;O)</translation>
    </message>
    <message>
        <source>Nucleus sampling: sample only among the most likely tokens whose probabilities add up to p. Lower is more conservative; 1 turns it off.</source>
        <translation>核采样：只在概率累加达到 p 的最可能 token 中采样。越低越保守；1 表示关闭。</translation>
    </message>
    <message>
        <source>Top-&amp;k</source>
        <translation>Top-k(&amp;K)</translation>
    </message>
    <message>
        <source>Sample only among the k most likely tokens. 0 turns it off.</source>
        <translation>只在最可能的 k 个 token 中采样。0 表示关闭。</translation>
    </message>
    <message>
        <source>off</source>
        <translation>关闭</translation>
    </message>
    <message>
        <source>&amp;Min-p</source>
        <translation>Min-p(&amp;M)</translation>
    </message>
    <message>
        <source>Drop tokens whose probability is below min-p times that of the most likely token. Keeps the reply coherent at higher temperatures; 0 turns it off.</source>
        <translation>丢弃概率低于「min-p × 最可能 token 概率」的 token。在较高温度下保持回复连贯；0 表示关闭。</translation>
    </message>
    <message>
        <source>Repetition pena&amp;lty</source>
        <translation>重复惩罚(&amp;L)</translation>
    </message>
    <message>
        <source>Makes tokens already in the prompt or the reply less likely (positive logits divided by the penalty, negative ones multiplied). 1 turns it off; 1.05 to 1.2 is usual.</source>
        <translation>降低提示词或回复中已出现 token 的概率（正 logit 除以惩罚系数，负 logit 乘以惩罚系数）。1 表示关闭；通常取 1.05 到 1.2。</translation>
    </message>
    <message>
        <source>Pr&amp;esence penalty</source>
        <translation>存在惩罚(&amp;E)</translation>
    </message>
    <message>
        <source>Subtracted once from the logit of every token already in the reply: nudges the model towards new words and topics. 0 turns it off; negative values encourage repetition.</source>
        <translation>回复中已出现的每个 token，其 logit 减去一次该值：促使模型使用新的词语和话题。0 表示关闭；负值会鼓励重复。</translation>
    </message>
    <message>
        <source>&amp;Frequency penalty</source>
        <translation>频率惩罚(&amp;F)</translation>
    </message>
    <message>
        <source>Subtracted from a token&apos;s logit once for every time it is already in the reply: discourages repeating the same words verbatim. 0 turns it off.</source>
        <translation>token 在回复中每出现一次，其 logit 就减去一次该值：避免逐字重复相同的词。0 表示关闭。</translation>
    </message>
    <message>
        <source>Max tokens</source>
        <translation>最大 token 数</translation>
    </message>
    <message>
        <source>The most tokens the reply may have. Generation stops there (finish reason &quot;length&quot;) or earlier at the end of the context.</source>
        <translation>回复最多可包含的 token 数。生成会在此处停止（结束原因为 &quot;length&quot;），或在上下文用完时提前停止。</translation>
    </message>
    <message>
        <source>The random seed for sampling. A fixed seed with the same model, precision, prompt and parameters gives the same reply again. Unchecked: a new random seed for every reply (the one used is saved with the reply).</source>
        <translation>采样用的随机种子。相同的模型、精度、提示词和参数配上固定的种子，会再次得到相同的回复。未勾选：每次回复使用新的随机种子（所用的种子会随回复保存）。</translation>
    </message>
    <message>
        <source>Seed</source>
        <translation>种子</translation>
    </message>
    <message>
        <source>New</source>
        <translation>新建</translation>
    </message>
    <message>
        <source>Pick a new random fixed seed</source>
        <translation>选择一个新的随机固定种子</translation>
    </message>
    <message>
        <source>New random seed</source>
        <translation>新的随机种子</translation>
    </message>
    <message>
        <source>Stop strin&amp;gs (one per line):</source>
        <translation>停止字符串（每行一个）(&amp;G)：</translation>
    </message>
    <message>
        <source>None: the model&apos;s end-of-turn token ends the reply</source>
        <translation>无：由模型的回合结束 token 结束回复</translation>
    </message>
    <message>
        <source>Stop strings</source>
        <translation>停止字符串</translation>
    </message>
    <message>
        <source>The reply ends when it produces one of these strings. One per line; write \n for a line break, \t for a tab and \\ for a backslash.</source>
        <translation>回复生成其中任一字符串时结束。每行一个；用 \n 表示换行，\t 表示制表符，\\ 表示反斜杠。</translation>
    </message>
    <message>
        <source>Reset to model defaults</source>
        <translation>重置为模型默认值</translation>
    </message>
    <message>
        <source>Unset every field: the reply uses the model&apos;s generation_config values</source>
        <translation>清除所有字段：回复使用模型 generation_config 中的值</translation>
    </message>
    <message>
        <source>random</source>
        <translation>随机</translation>
    </message>
    <message>
        <source>Unchecked: the model&apos;s default, %1.</source>
        <translation>未勾选：使用模型默认值 %1。</translation>
    </message>
</context>
<context>
    <name>es::ServedRequestModel</name>
    <message>
        <source>Time</source>
        <translation>时间</translation>
    </message>
    <message>
        <source>Client</source>
        <translation>客户端</translation>
    </message>
    <message>
        <source>Route</source>
        <translation>路由</translation>
    </message>
    <message>
        <source>Model</source>
        <translation>模型</translation>
    </message>
    <message>
        <source>Prompt</source>
        <translation>提示词</translation>
    </message>
    <message>
        <source>Completion</source>
        <translation>补全</translation>
    </message>
    <message>
        <source>Status</source>
        <translation>状态</translation>
    </message>
    <message>
        <source>Duration</source>
        <translation>耗时</translation>
    </message>
    <message>
        <source>TTFT</source>
        <translation>TTFT</translation>
    </message>
    <message>
        <source>Prompt tokens of a completion (the chat template applied)</source>
        <translation>补全请求的提示词 token 数（已套用对话模板）</translation>
    </message>
    <message>
        <source>Tokens the model generated for it</source>
        <translation>模型为该请求生成的 token 数</translation>
    </message>
    <message>
        <source>From the request&apos;s last byte received to the answer&apos;s last byte sent</source>
        <translation>从收到请求的最后一个字节到发出回答的最后一个字节</translation>
    </message>
    <message>
        <source>Time to first token of a streaming completion: from its submission to the engine to its first token</source>
        <translation>流式补全的首 token 时间：从提交给引擎到生成第一个 token</translation>
    </message>
    <message>
        <source>%1 %2 (stream)</source>
        <translation>%1 %2（流式）</translation>
    </message>
    <message>
        <source>%1 — %2 %3 from %4</source>
        <translation>%1 — 来自 %4 的 %2 %3</translation>
    </message>
    <message>
        <source>Engine request %1, finished: %2</source>
        <translation>引擎请求 %1，结束原因：%2</translation>
    </message>
    <message>
        <source>No answer was written: the client went first</source>
        <translation>未写出回答：客户端已先断开</translation>
    </message>
</context>
<context>
    <name>es::ServerDialog</name>
    <message>
        <source>Server</source>
        <translation>服务器</translation>
    </message>
    <message>
        <source>The address to listen on: 127.0.0.1 serves this machine only; 0.0.0.0 (or this machine&apos;s address) lets other machines connect, and needs an API key</source>
        <translation>要监听的地址：127.0.0.1 只为本机提供服务；0.0.0.0（或本机的地址）允许其他机器连接，需要 API 密钥</translation>
    </message>
    <message>
        <source>any free port</source>
        <translation>任意空闲端口</translation>
    </message>
    <message>
        <source>The TCP port; 0 picks any free one (the URL below shows which)</source>
        <translation>TCP 端口；0 表示任选一个空闲端口（下方的 URL 会显示实际端口）</translation>
    </message>
    <message>
        <source>Port</source>
        <translation>端口</translation>
    </message>
    <message>
        <source>none</source>
        <translation>无</translation>
    </message>
    <message>
        <source>Clients must send “Authorization: Bearer &lt;key&gt;”; without a key only this machine may be served</source>
        <translation>客户端必须发送“Authorization: Bearer &lt;密钥&gt;”；没有密钥时只能为本机提供服务</translation>
    </message>
    <message>
        <source>Show</source>
        <translation>显示</translation>
    </message>
    <message>
        <source>Show or hide the key</source>
        <translation>显示或隐藏密钥</translation>
    </message>
    <message>
        <source>Remember key</source>
        <translation>记住密钥</translation>
    </message>
    <message>
        <source>Stores the key in ExpertScope&apos;s settings file, unencrypted</source>
        <translation>将密钥以未加密的形式保存在 ExpertScope 的设置文件中</translation>
    </message>
    <message>
        <source>Allow without a key on an address other machines can reach</source>
        <translation>允许无密钥访问（在其他机器可访问的地址上）</translation>
    </message>
    <message>
        <source>Anyone who can reach the address could then use the model</source>
        <translation>这样任何能访问该地址的人都可以使用此模型</translation>
    </message>
    <message>
        <source>The name clients send as “model” and /v1/models lists; empty: the model folder&apos;s name</source>
        <translation>客户端作为“model”发送、/v1/models 列出的名称；留空则使用模型文件夹的名称</translation>
    </message>
    <message>
        <source>Address</source>
        <translation>地址</translation>
    </message>
    <message>
        <source>API key (optional)</source>
        <translation>API 密钥（可选）</translation>
    </message>
    <message>
        <source>Model name</source>
        <translation>模型名称</translation>
    </message>
    <message>
        <source>Start</source>
        <translation>启动</translation>
    </message>
    <message>
        <source>Stop</source>
        <translation>停止</translation>
    </message>
    <message>
        <source>not serving</source>
        <translation>未在提供服务</translation>
    </message>
    <message>
        <source>Where the server listens; OpenAI clients take this followed by /v1 as their base URL</source>
        <translation>服务器监听的位置；OpenAI 客户端以它加上 /v1 作为 base URL</translation>
    </message>
    <message>
        <source>Copy</source>
        <translation>复制</translation>
    </message>
    <message>
        <source>Copy the URL</source>
        <translation>复制 URL</translation>
    </message>
    <message>
        <source>URL</source>
        <translation>URL</translation>
    </message>
    <message>
        <source>Requests: answered by the server&apos;s routes. Active: being answered now. Errors: answered with a status of 400 or more. tok/s: tokens generated for its requests per second over the last two seconds.</source>
        <translation>请求：服务器各路由已回答的请求。活动：正在回答的请求。错误：以 400 或更高状态码回答的请求。tok/s：最近两秒内每秒为其请求生成的 token 数。</translation>
    </message>
    <message>
        <source>Clear</source>
        <translation>清空</translation>
    </message>
    <message>
        <source>Empty the requests log (the totals stay)</source>
        <translation>清空请求日志（总计保留）</translation>
    </message>
    <message>
        <source>Copied %1.</source>
        <translation>已复制 %1。</translation>
    </message>
    <message>
        <source>Hide</source>
        <translation>隐藏</translation>
    </message>
    <message>
        <source>Stopped.</source>
        <translation>已停止。</translation>
    </message>
    <message>
        <source>The server stopped: %1. Start it again to serve the model loaded then.</source>
        <translation>服务器已停止：%1。再次启动即可为届时加载的模型提供服务。</translation>
    </message>
    <message>
        <source>Serving without a key.</source>
        <translation>正在无密钥提供服务。</translation>
    </message>
    <message>
        <source>Serving; clients send “Authorization: Bearer &lt;key&gt;”.</source>
        <translation>正在提供服务；客户端需发送“Authorization: Bearer &lt;密钥&gt;”。</translation>
    </message>
    <message>
        <source>OpenAI clients: base URL %1/v1, model “%2”.</source>
        <translation>OpenAI 客户端：base URL 为 %1/v1，模型为“%2”。</translation>
    </message>
    <message>
        <source>the model folder&apos;s name</source>
        <translation>模型文件夹的名称</translation>
    </message>
    <message>
        <source>Serving %1 from the app&apos;s engine: the server&apos;s requests and your chats share the loaded model and are batched together. Loading another model stops the server.</source>
        <translation>正在用应用的引擎提供 %1：服务器的请求与你的对话共用已加载的模型，并一起批处理。加载另一个模型会停止服务器。</translation>
    </message>
    <message>
        <source>Serve %1, the model loaded in the app, to OpenAI-compatible clients over HTTP (/v1/chat/completions, /v1/completions, /v1/models, /metrics). No second copy is loaded: the server and your chats share the engine.</source>
        <translation>通过 HTTP 向兼容 OpenAI 的客户端提供应用中已加载的模型 %1（/v1/chat/completions、/v1/completions、/v1/models、/metrics）。不会再加载第二份副本：服务器与你的对话共用引擎。</translation>
    </message>
    <message>
        <source>Serve the model loaded in the app to OpenAI-compatible clients over HTTP. Open a model first (File ▸ Open model…).</source>
        <translation>通过 HTTP 向兼容 OpenAI 的客户端提供应用中已加载的模型。请先打开一个模型（文件 ▸ 打开模型…）。</translation>
    </message>
    <message>
        <source>Requests %1 · active %2 · errors %3 · %4 tok/s · tokens: %5 prompt, %6 completion</source>
        <translation>请求 %1 · 活动 %2 · 错误 %3 · %4 tok/s · token：提示词 %5，补全 %6</translation>
    </message>
</context>
<context>
    <name>es::StepTimelineView</name>
    <message>
        <source>attention</source>
        <translation>注意力</translation>
    </message>
    <message>
        <source>MoE routed</source>
        <translation>MoE 路由专家</translation>
    </message>
    <message>
        <source>MoE shared</source>
        <translation>MoE 共享专家</translation>
    </message>
    <message>
        <source>dense</source>
        <translation>稠密</translation>
    </message>
    <message>
        <source>head and sampling</source>
        <translation>输出头和采样</translation>
    </message>
    <message>
        <source>other</source>
        <translation>其他</translation>
    </message>
    <message>
        <source>µs from the step&apos;s first launch</source>
        <translation>自该步首次内核启动起的 µs</translation>
    </message>
    <message>
        <source>GB/s read</source>
        <translation>读取 GB/s</translation>
    </message>
    <message>
        <source>No step timed on the GPU yet.</source>
        <translation>尚无在 GPU 上计时的步。</translation>
    </message>
    <message>
        <source>Step %1: %2 launches in %3 µs on the GPU; %4 MB read at %5 GB/s%6</source>
        <translation>第 %1 步：在 GPU 上 %3 µs 内 %2 次内核启动；以 %5 GB/s 读取 %4 MB%6</translation>
    </message>
    <message>
        <source> (%1% of the measured %2 GB/s; dashed line)</source>
        <translation>（为实测 %2 GB/s 的 %1%；虚线）</translation>
    </message>
    <message>
        <source>%1 — %2</source>
        <translation>%1 — %2</translation>
    </message>
    <message>
        <source>, layer %1</source>
        <translation>，第 %1 层</translation>
    </message>
    <message>
        <source>%1 µs, from %2 µs</source>
        <translation>%1 µs，自 %2 µs 起</translation>
    </message>
    <message>
        <source>%1 read at %2 GB/s</source>
        <translation>以 %2 GB/s 读取 %1</translation>
    </message>
    <message>
        <source> (%1% of the device&apos;s measured read bandwidth)</source>
        <translation>（为设备实测读取带宽的 %1%）</translation>
    </message>
    <message>
        <source>%1% of its bytes are the shared experts&apos;: its time is split so between the MoE phases</source>
        <translation>其字节中有 %1% 属于共享专家：其耗时按此比例在两个 MoE 阶段之间分配</translation>
    </message>
    <message>
        <source>(its bytes are not modelled)</source>
        <translation>（未对其字节数建模）</translation>
    </message>
    <message>
        <source>One engine step timed on the GPU: each bar a launch, as wide as its time and as high as the bytes per second it read; the dashed line is the device&apos;s measured read bandwidth.</source>
        <translation>在 GPU 上计时的一个引擎步：每个条形代表一次内核启动，宽度为其耗时，高度为其每秒读取的字节数；虚线是设备实测的读取带宽。</translation>
    </message>
</context>
</TS>
