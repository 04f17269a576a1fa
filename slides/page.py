"""The HTML around the slides: inline CSS and a few lines of script, nothing loaded from anywhere.

Without the script every slide shows, one under the other (and that is also how a deck prints: one slide
per landscape page). With it, one slide at a time: → ↓ space PageDown Enter or a click on the right two
thirds go forward, ← ↑ Backspace PageUp or a click on the left third go back, Home/End jump, `#7` in the
address opens slide 7, and the counter shows where you are.
"""

CSS = """
:root{--fg:#1b1f24;--muted:#57606a;--accent:#0b5cad;--code:#f6f8fa;--line:#d0d7de}
*{box-sizing:border-box}
html,body{margin:0;background:#fff;color:var(--fg);font-family:"DejaVu Sans","Segoe UI",Helvetica,Arial,sans-serif}
.slide{width:100vw;height:100vh;padding:4vh 5.5vw 6vh;display:flex;flex-direction:column;overflow:hidden;
  font-size:min(2.3vw,4vh);line-height:1.35;border-bottom:1px solid var(--line)}
.js .slide{display:none;border:0}.js .slide.active{display:flex}
.slide.title{justify-content:center}.slide.title h1{font-size:2.1em}
h1{font-size:1.6em;margin:0 0 .4em;color:var(--accent)}
h2{font-size:1.3em;margin:0 0 .45em;color:var(--accent)}
h3{font-size:1em;margin:.3em 0}
p,ul,ol{margin:.25em 0 .45em}li{margin:.12em 0}
code{font-family:"DejaVu Sans Mono",Menlo,Consolas,monospace;font-size:.88em;background:var(--code);padding:0 .15em;
  border-radius:3px}
pre{font-size:.56em;line-height:1.3;background:var(--code);padding:.6em .9em;border-radius:6px;overflow:auto;
  margin:.25em 0;min-height:0;flex:0 1 auto}
pre code{background:none;padding:0;font-size:1em}
pre code>span{display:block;min-height:1.3em}
.diff .add{background:#dafbe1;color:#116329}.diff .del{background:#ffebe9;color:#82071e}
.diff .hunk{color:#8250df}.diff .file{color:var(--muted);font-weight:bold}
.src{font-size:.5em;color:var(--muted);margin-top:.2em}
table{border-collapse:collapse;font-size:.62em;margin:.2em 0}
th,td{border-bottom:1px solid var(--line);padding:.18em .55em;text-align:left}
th{background:var(--code)}
figure{margin:.2em 0;display:flex;flex-direction:column;align-items:center;flex:0 0 auto}
figure img{max-width:100%;max-height:60vh;object-fit:contain}
figure.table{align-items:flex-start}
figcaption{font-size:.5em;color:var(--muted);margin-top:.25em;text-align:center}
figure.table figcaption{text-align:left}
.prov{font-size:.9em;color:var(--muted)}
.placeholder{border:3px dashed #bf8700;background:#fff8c5;color:#5c4600;padding:.8em 1em;border-radius:8px;
  font-size:.75em;margin:.3em 0}
.missing{background:#fff8c5;color:#5c4600;padding:0 .25em;border-radius:3px;font-size:.85em}
.note{color:var(--muted);font-style:italic}
.cols{display:flex;gap:3vw;min-height:0;flex:1 1 auto}
.cols>div{flex:1 1 0;min-width:0;display:flex;flex-direction:column}
.cols pre{white-space:pre-wrap;overflow-wrap:anywhere}.cols figure img{max-height:52vh}
.index{padding:5vh 6vw;font-size:min(1.9vw,3.4vh);line-height:1.4}
.index ul{font-size:1.1em;list-style:none;padding:0}.index li{margin:.35em 0}.index a{color:var(--accent)}
.bar{position:fixed;bottom:0;left:0;right:0;display:flex;justify-content:space-between;padding:.8vh 2vw;
  font-size:1.7vh;color:var(--muted);pointer-events:none}
@media print{
  @page{size:13.333in 7.5in;margin:0}
  .slide,.js .slide{display:flex!important;width:13.333in;height:7.5in;font-size:21pt;border:0;
    page-break-after:always;break-after:page}
  figure img{max-height:4.3in!important}.cols figure img{max-height:3.8in!important}
  .bar{display:none}
}
"""

JS = """
(function(){
  var s=[].slice.call(document.querySelectorAll('.slide')),i=0,c=document.getElementById('counter');
  if(s.length<2)return;
  document.body.classList.add('js');
  function go(n){i=Math.max(0,Math.min(s.length-1,n));
    s.forEach(function(e,k){e.classList.toggle('active',k===i)});
    c.textContent=(i+1)+' / '+s.length;
    try{history.replaceState(null,'','#'+(i+1))}catch(e){}}
  document.addEventListener('keydown',function(e){
    if(e.altKey||e.ctrlKey||e.metaKey)return;var k=e.key;
    if(k==='ArrowRight'||k==='ArrowDown'||k==='PageDown'||k==='Enter'||
       (k===' '&&!e.shiftKey)){go(i+1);e.preventDefault()}
    else if(k==='ArrowLeft'||k==='ArrowUp'||k==='PageUp'||k==='Backspace'||
            (k===' '&&e.shiftKey)){go(i-1);e.preventDefault()}
    else if(k==='Home'){go(0)}else if(k==='End'){go(s.length-1)}});
  document.addEventListener('click',function(e){
    if(e.target.closest('a,pre,table')||String(window.getSelection()))return;
    go(e.clientX<window.innerWidth/3?i-1:i+1)});
  window.addEventListener('hashchange',function(){go((parseInt(location.hash.slice(1),10)||1)-1)});
  go((parseInt(location.hash.slice(1),10)||1)-1);
})();
"""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>{title}</title>
<style>{css}</style>
</head><body>
{body}
<div class="bar"><span>{footer}</span><span id="counter"></span></div>
<script>{js}</script>
</body></html>
"""


def page(title: str, body: str, footer: str = "", script: bool = True) -> str:
    """title, footer: already HTML-escaped."""
    return PAGE.format(title=title, css=CSS, js=JS if script else "", body=body, footer=footer)
